"""A healthy model fed by a starving loader: each example takes 0.2 ms to "decode" on the main process.

python -m doctor examples/starved_loader.py
"""

import time

import torch
from digits_cnn import TRAIN, SmallCNN, validation  # noqa: F401 - validation is part of the recipe
from torch import nn
from torch.utils.data import DataLoader, Dataset

STEPS = 200
loss = nn.CrossEntropyLoss()


class SlowDigits(Dataset):
    """The digits images, with the per-example cost of reading and decoding a real image file."""

    def __len__(self):
        return len(TRAIN)

    def __getitem__(self, index):
        time.sleep(0.0002)
        return TRAIN[index]


def model():
    return SmallCNN(batchnorm=True)


def batches():
    return DataLoader(
        SlowDigits(), batch_size=64, shuffle=True, drop_last=True
    )  # num_workers=0: all on the main process


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)
