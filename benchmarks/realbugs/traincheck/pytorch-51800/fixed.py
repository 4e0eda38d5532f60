"""TrainCheck pytorch-51800, fixed: the spectral-normalized network is evaluated only after it has trained.

Upstream issue: https://github.com/pytorch/pytorch/issues/51800; TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/pytorch-51800 (mnist_51800_buggy.py). nn.utils.spectral_norm estimates
each layer's largest singular value by power iteration in a forward pre-hook, and only in training mode. A program
that evaluates its fresh model (model.eval(), a test pass) before the first training forward divides every weight
by a value computed from the random starting vectors, so that first evaluation does not show the initialized
model it claims to measure. The fix (TrainCheck's mnist_51800_correct.py), as here: each epoch trains first and
tests after, so the power iteration has run before any evaluation; the buggy program is buggy.py.

Design kept: a CNN whose layers are all wrapped in nn.utils.spectral_norm: Conv2d(1, 32, 3, padding 1), max-pool
2, ReLU, Conv2d(32, 64, 3, padding 1), max-pool 2, ReLU, Linear(., 128), ReLU, Linear(128, 10) giving logits;
nn.CrossEntropyLoss; Adam with its defaults; batch size 64 shuffled, test batch 1000; per epoch a test pass
(eval mode, no_grad) and a train pass, the train pass first. Changed: MNIST (28x28, normalized) -> scikit-learn's
digits (8x8, normalized by the training images' mean and std), 1437 training and 360 test images, so the first
linear layer takes 64 * 2 * 2 features; 2 epochs of 938 steps -> 40 epochs of 23 steps; the reproduction's
"early stopping for demonstration" after 11 steps (which its buggy_resolved.py drops) is left out.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.realbugs.traincheck.common import N_TRAIN, digits, epochs, standardize

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/pytorch-51800/"
    "mnist_51800_correct.py @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, TEST_BATCH, EPOCHS = 64, 1000, 40
IMAGES, LABELS = digits()
TRAIN_X, TEST_X = standardize(IMAGES[:N_TRAIN], IMAGES[N_TRAIN:])
TRAIN = TensorDataset(TRAIN_X, LABELS[:N_TRAIN])
TEST = TensorDataset(TEST_X, LABELS[N_TRAIN:])
loss = nn.CrossEntropyLoss()
sn = nn.utils.spectral_norm


class SimpleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = sn(nn.Conv2d(1, 32, 3, padding=1))
        self.conv2 = sn(nn.Conv2d(32, 64, 3, padding=1))
        self.fc1 = sn(nn.Linear(64 * 2 * 2, 128))
        self.fc2 = sn(nn.Linear(128, 10))

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def model() -> nn.Module:
    return SimpleCNN()


def batches():
    return DataLoader(TRAIN, batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(TEST, batch_size=TEST_BATCH)


def optimizer(params):
    return torch.optim.Adam(params)


def test(net, loader) -> tuple[float, float]:
    """The program's test pass: mean loss per example and accuracy, in eval mode."""
    net.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            total += loss(out, y).item()
            correct += (out.argmax(1) == y).sum().item()
    return total / len(loader.dataset), correct / len(loader.dataset)


def train_epoch(doctor, net, opt, loader) -> None:
    net.train()
    for x, y in doctor.watch(loader):
        opt.zero_grad()
        batch_loss = loss(net(x), y)
        batch_loss.backward()
        doctor.after_backward(batch_loss)
        opt.step()


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_dl, test_dl = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=test_dl)
    for _ in range(epochs(EPOCHS)):
        train_epoch(doctor, net, opt, train_dl)
        test(net, test_dl)  # the fix: after the training forwards, which ran the power iteration
    return doctor
