"""A working recipe with a harmless oddity: two thirds of a wide layer's ReLUs are dead at initialization.

The hidden biases start at -1.25, so most of the 512 units are never active on the first batch: what the
dead_relu check reads. The third that lives is still far wider than the task needs, and the run learns digits
as well as the quick references do, so the doctor calls it healthy and lists the dead units as a warning
(exit status 0).

python -m doctor examples/wide_dead_start.py
"""

import torch
from digits_cnn import TRAIN, validation  # noqa: F401 - validation is part of the recipe
from torch import nn
from torch.utils.data import DataLoader

STEPS = 300
loss = nn.CrossEntropyLoss()


def model():
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    with torch.no_grad():
        net[1].bias.fill_(-1.25)  # about two standard deviations below the pre-activations' mean
    return net


def batches():
    return DataLoader(TRAIN, batch_size=64, shuffle=True, drop_last=True)


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)
