"""A small CNN on digits whose training loop forgets optimizer.zero_grad(): gradients pile up step after step.

The loop in train() is the user's own; the doctor adds three lines (marked). Run it with
    python -m doctor examples/cnn_no_zero_grad.py
"""

import torch
from digits_cnn import TRAIN, SmallCNN, validation  # noqa: F401 - validation is part of the recipe
from torch import nn
from torch.utils.data import DataLoader

loss = nn.CrossEntropyLoss()


def model():
    return SmallCNN(batchnorm=True)


def batches():
    return DataLoader(TRAIN, batch_size=64, shuffle=True, drop_last=True)


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)


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
