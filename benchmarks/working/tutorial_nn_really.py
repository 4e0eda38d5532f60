"""pytorch/tutorials "What is torch.nn really?": its final three-layer CNN classifies 28x28 digits with fit().

Design kept (beginner_source/nn_tutorial.py, its last model, the one moved to the device): images stored as flat
rows of 784 values in [0, 1], reshaped to (N, 1, 28, 28) by a wrapper around each DataLoader; nn.Sequential of
Conv2d(1, 16, 3, stride 2, padding 1), ReLU, Conv2d(16, 16, 3, stride 2, padding 1), ReLU, Conv2d(16, 10, 3,
stride 2, padding 1), ReLU, AdaptiveAvgPool2d(1) and a Lambda flattening to (N, 10) (so the logits come out of a
ReLU, as in the tutorial); F.cross_entropy; optim.SGD at lr 0.1 with momentum 0.9; training batches of 64,
shuffled; validation batches of 128, unshuffled; fit() runs 2 epochs, each model.train() with loss_batch (loss,
backward, opt.step(), opt.zero_grad()) over the training batches, then model.eval() and the validation loss
under no_grad, weighted by batch size.
Changed: the data. MNIST (50000 training, 10000 validation images of 28x28) -> scikit-learn's digits (1797
images 8x8, 16 grey levels) scaled to [0, 1], resized to 28x28 (bilinear) and flattened to 784 values; the
first 1437 train, the last 360 are the validation set. The epochs: with 23 batches per epoch the tutorial's 2
epochs would be 46 steps where the original takes about 1564 (the data is 35 times smaller), so the port runs 68
epochs, 1564 steps: the original's training per weight (the benchmark's rule, benchmarks/working/__main__.py).
"""

import numpy as np
import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/tutorials beginner_source/nn_tutorial.py @ 764a8d6aed986f155098d91ea55a1f0c95b26dd8"
BS, LR, MOMENTUM, EPOCHS, N_TRAIN = 64, 0.1, 0.9, 68, 1437  # 68 epochs of 23 batches: the original 1564 steps
loss = F.cross_entropy


def digits_flat() -> tuple[torch.Tensor, torch.Tensor]:
    """Scikit-learn's digits resized to 28x28 and stored as flat rows of 784 floats in [0, 1], as MNIST's pickle is."""
    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    big = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    return big.reshape(len(big), 784), torch.tensor(digits.target, dtype=torch.int64)


X, Y = digits_flat()
x_train, y_train, x_valid, y_valid = X[:N_TRAIN], Y[:N_TRAIN], X[N_TRAIN:], Y[N_TRAIN:]
train_ds, valid_ds = TensorDataset(x_train, y_train), TensorDataset(x_valid, y_valid)


class Lambda(nn.Module):
    """A layer made of a function."""

    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, x):
        return self.func(x)


def flatten(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.size(0), -1)


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(flatten),
    )


def preprocess(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.view(-1, 1, 28, 28), y


class WrappedDataLoader:
    """A DataLoader whose batches pass through a function on the way out."""

    def __init__(self, dl, func):
        self.dl, self.func = dl, func

    def __len__(self):
        return len(self.dl)

    def __iter__(self):
        for batch in self.dl:
            yield self.func(*batch)


def get_data(train, valid, bs):
    return DataLoader(train, batch_size=bs, shuffle=True), DataLoader(valid, batch_size=bs * 2)


def batches():
    return WrappedDataLoader(get_data(train_ds, valid_ds, BS)[0], preprocess)


def validation():
    return WrappedDataLoader(get_data(train_ds, valid_ds, BS)[1], preprocess)


def optimizer(params):
    return optim.SGD(params, lr=LR, momentum=MOMENTUM)


def train(Doctor):
    train_dl, valid_dl = get_data(train_ds, valid_ds, BS)
    train_dl, valid_dl = WrappedDataLoader(train_dl, preprocess), WrappedDataLoader(valid_dl, preprocess)
    net = model()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss, validation=valid_dl)

    def loss_batch(xb, yb, step=False):
        batch_loss = loss(net(xb), yb)
        if step:
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
            opt.zero_grad()
        return batch_loss.item(), len(xb)

    val_losses = []  # what fit() prints after each epoch
    for _ in range(epochs(EPOCHS)):  # fit()
        net.train()
        for xb, yb in doctor.watch(train_dl):
            loss_batch(xb, yb, step=True)
        net.eval()
        with torch.no_grad():
            losses, nums = zip(*[loss_batch(xb, yb) for xb, yb in valid_dl], strict=True)
        val_losses.append(np.sum(np.multiply(losses, nums)) / np.sum(nums))
    return doctor
