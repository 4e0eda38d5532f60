"""TrainCheck stackoverflow-60335387, buggy: the loop never calls optimizer.zero_grad().

Upstream issue: https://stackoverflow.com/questions/60335387 ("PyTorch MNIST example not converge"); TrainCheck's
reproduction silent-issue-detection/bug-reprod-scripts/stackoverflow-60335387. A two-convolution MNIST network
trained with Adam at lr 1e-4 gets worse instead of converging: every step adds its gradient to the ones before,
so each update follows the sum of all the gradients since the start. Fix (fixed.py): zero the gradients at the
start of every step.

Design kept: Conv2d(1, 32, 3), ReLU, Conv2d(32, 64, 3), max-pool 2, flatten, Linear(., 128), ReLU, Linear(128, 10)
giving logits; nn.CrossEntropyLoss; Adam at lr 1e-4; batch size 30, the training set shuffled, the held-out set
evaluated after every epoch in eval mode under no_grad. Changed: MNIST (normalized by its mean and std) ->
scikit-learn's digits (8x8, normalized the same way), 1437 training and 360 held-out images, so the first linear
layer takes 64 * 2 * 2 features; 10 epochs of 2000 steps -> 40 epochs of 48 steps (1920 steps).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.realbugs.traincheck.common import N_TRAIN, digits, epochs, standardize

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/stackoverflow-60335387/bug.py"
    " @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS = 30, 1e-4, 40
IMAGES, LABELS = digits()
TRAIN_X, TEST_X = standardize(IMAGES[:N_TRAIN], IMAGES[N_TRAIN:])
TRAIN = TensorDataset(TRAIN_X, LABELS[:N_TRAIN])
TEST = TensorDataset(TEST_X, LABELS[N_TRAIN:])
loss = nn.CrossEntropyLoss()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(self.conv2(F.relu(self.conv1(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def model() -> nn.Module:
    return Net()


def batches():
    return DataLoader(TRAIN, batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(TEST, batch_size=BATCH_SIZE)


def optimizer(params):
    return torch.optim.Adam(params, lr=RATE)


def evaluate(net, loader) -> float:
    """The held-out accuracy after each epoch."""
    net.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (net(x).argmax(1) == y).sum().item()
    return correct / len(loader.dataset)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_dl, test_dl = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=test_dl)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for x, y in doctor.watch(train_dl):
            # the bug: no opt.zero_grad() here, so the gradients of every step so far add up
            batch_loss = loss(net(x), y)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
        evaluate(net, test_dl)
    return doctor
