"""The healthy CNN recipe, trained by the user's own loop, which forgets optimizer.zero_grad().

Gradients pile up step after step. The loop in train() is the user's; the doctor adds three lines (marked). Run it with
    python -m doctor examples/cnn_no_zero_grad.py
"""

import torch
from healthy_cnn import batches, loss, model, optimizer, validation  # noqa: F401 - the recipe's pieces


def train(Doctor):
    torch.manual_seed(0)
    net, loader = model(), batches()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss)  # added line 1
    for _epoch in range(15):
        for x, y in doctor.watch(loader):  # added line 2 (was: for x, y in loader)
            out = loss(net(x), y)
            out.backward()  # the bug: no opt.zero_grad() anywhere
            doctor.after_backward(out)  # added line 3
            opt.step()
    return doctor  # the command line asks for the report
