"""A healthy recipe: a small CNN with BatchNorm on digits' 8x8 images, Adam at 1e-3.

python -m doctor examples/healthy_cnn.py
"""

import torch
from digits_cnn import TRAIN, SmallCNN, validation  # noqa: F401 - validation is part of the recipe
from torch import nn
from torch.utils.data import DataLoader

STEPS = 300
loss = nn.CrossEntropyLoss()


def model():
    return SmallCNN(batchnorm=True)


def batches():
    return DataLoader(TRAIN, batch_size=64, shuffle=True, drop_last=True)


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)
