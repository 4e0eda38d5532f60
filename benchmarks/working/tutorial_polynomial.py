"""pytorch/tutorials polynomial_nn: a third-degree polynomial (one linear layer) fits sin(x) on [-pi, pi].

Design kept (beginner_source/examples_nn/polynomial_nn.py): 2000 points x evenly spaced on [-pi, pi], target
sin(x); features (x, x^2, x^3); the model nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1)), so one output per
point; nn.MSELoss(reduction="sum"); the whole 2000 points every step (full batch), no shuffling, no validation;
2000 steps of plain gradient descent at 1e-6, gradients cleared with model.zero_grad() before each backward.
Changed: the original updates the weights by hand (`param -= learning_rate * param.grad` under no_grad);
torch.optim.SGD(lr=1e-6) without momentum or weight decay takes exactly that step, and gives the doctor an
optimizer to watch. Nothing else: the data is generated, as in the original.
"""

import math

import torch
from common import epochs
from torch import nn

SOURCE = "pytorch/tutorials beginner_source/examples_nn/polynomial_nn.py @ 90fb0068a1941e996b100fd9b4e05dbaa497076e"
POINTS, STEPS, RATE = 2000, 2000, 1e-6
X = torch.linspace(-math.pi, math.pi, POINTS)
Y = torch.sin(X)
XX = X.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))  # (2000, 3): x, x^2, x^3
loss = nn.MSELoss(reduction="sum")


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))


def batches():
    return [(XX, Y)]


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss)

    def every_step():
        for _ in range(epochs(STEPS)):
            yield XX, Y

    for xx, y in doctor.watch(every_step()):
        y_pred = net(xx)
        output = loss(y_pred, y)
        net.zero_grad()
        output.backward()
        doctor.after_backward(output)
        opt.step()
    return doctor
