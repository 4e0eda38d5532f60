"""pytorch/examples regression: a linear model fits a random degree-4 polynomial with smooth L1 loss.

Design kept (regression/main.py): features [x, x^2, x^3, x^4] of x ~ N(0, 1); target weights N(0, 1) * 5 and
bias N(0, 1) * 5, drawn once; a fresh batch of 32 every step; nn.Linear(4, 1); F.smooth_l1_loss; plain SGD at
0.1 (the original writes `param.data.add_(-0.1 * param.grad)` after `fc.zero_grad()`: torch.optim.SGD(lr=0.1)
takes the same step); it stops when a batch's loss falls under 1e-3.
Changed: a cap of 2000 steps on the stop criterion (the original loops until it is met; it is met in a few
hundred steps), so that a run that never gets there still ends. The data is generated, as in the original.
"""

import torch
import torch.nn.functional as F
from common import epochs
from torch import nn

SOURCE = "pytorch/examples regression/main.py @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
POLY_DEGREE, BATCH_SIZE, RATE, STOP_LOSS, MAX_STEPS = 4, 32, 0.1, 1e-3, 2000
W_TARGET = torch.randn(POLY_DEGREE, 1) * 5  # drawn at import: the runner seeds torch first
B_TARGET = torch.randn(1) * 5
loss = F.smooth_l1_loss


def make_features(x: torch.Tensor) -> torch.Tensor:
    x = x.unsqueeze(1)
    return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)


def get_batch(batch_size: int = BATCH_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    x = make_features(torch.randn(batch_size))
    return x, x.mm(W_TARGET) + B_TARGET.item()


def model() -> nn.Module:
    return nn.Linear(POLY_DEGREE, 1)


def batches():
    return [get_batch() for _ in range(100)]


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE)


def train(Doctor):
    fc = model()
    opt = optimizer(fc.parameters())
    doctor = Doctor(fc, opt, loss)

    def stream():
        for _ in range(epochs(MAX_STEPS)):
            yield get_batch()

    for batch_x, batch_y in doctor.watch(stream()):
        fc.zero_grad()
        output = loss(fc(batch_x), batch_y)
        output.backward()
        doctor.after_backward(output)
        opt.step()
        if output.item() < STOP_LOSS:
            break
    return doctor
