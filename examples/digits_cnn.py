"""Shared by the example recipes: scikit-learn's digits as 1x8x8 images, and a small CNN for them."""

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits(seed: int = 0):
    """(train, validation) TensorDatasets: 75% / 25%, pixels standardized with training statistics."""
    features, labels = load_digits(return_X_y=True)
    images = torch.from_numpy(features.astype(np.float32).reshape(-1, 1, 8, 8))
    labels = torch.from_numpy(labels)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    train, val = order[: int(0.75 * len(labels))], order[int(0.75 * len(labels)) :]
    mean, std = images[train].mean(), images[train].std()
    images = (images - mean) / std
    return TensorDataset(images[train], labels[train]), TensorDataset(images[val], labels[val])


TRAIN, VAL = digits()


class SmallCNN(nn.Module):
    """Two 3x3 convolutions (with BatchNorm if asked), a 2x2 pool, and a two-layer head."""

    def __init__(self, channels: int = 16, hidden: int = 64, batchnorm: bool = True, classes: int = 10):
        super().__init__()

        def norm():
            return nn.BatchNorm2d(channels) if batchnorm else nn.Identity()

        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            norm(),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            norm(),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(channels * 16, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.head(self.features(x))


def validation():
    return DataLoader(VAL, batch_size=512)
