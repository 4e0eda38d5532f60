"""TrainCheck pytorch-115607, buggy: after one step without gradients the compiled Adam step updates nothing again.

Upstream issue: https://github.com/pytorch/pytorch/issues/115607; TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/pytorch-115607 (super_complex_buggy.py; a simulated trace there). A
training loop compiled with torch._dynamo (backend "eager") skips the forward and backward of one batch per epoch,
so that step's optimizer.step() sees every gradient None (zero_grad sets them to None) and should do nothing. Under
dynamo, Adam's step counter stopped advancing from that step on and the parameters stopped changing: the rest of
the run trains nothing, silently. The bug is in PyTorch 2.2's dynamo and is gone from the PyTorch installed here,
so this recipe re-creates its effect as a fact, as TrainCheck's own simulated trace does: the Adam below does
nothing at any step after the first step it took with no gradient. Fix (fixed.py): the same loop with a correct
Adam step (PyTorch's fix; eager mode behaves so).

Design kept (TrainCheck's super_complex_buggy.py, the stackoverflow-60335387 program with the bug's trigger):
Conv2d(1, 32, 3), ReLU, Conv2d(32, 64, 3), max-pool 2, flatten, Linear(., 128), ReLU, Linear(128, 10) giving
logits; nn.CrossEntropyLoss; Adam at lr 1e-4; batch size 30 shuffled; optimizer.zero_grad() every step; one batch
per epoch (its index 50) skipped before its forward pass while optimizer.step() still runs; a held-out pass after
each epoch. Changed: the loop is not compiled (the fault is stated, not triggered); MNIST -> scikit-learn's digits
(8x8, normalized), 1437 training and 360 held-out images; 10 epochs of 2000 steps -> 40 epochs of 48 steps, the
skipped batch at index 10 of each epoch.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.realbugs.traincheck.common import N_TRAIN, digits, epochs, standardize

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/pytorch-115607/"
    "super_complex_buggy.py @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS, SKIPPED = 30, 1e-4, 40, 10
IMAGES, LABELS = digits()
TRAIN_X, TEST_X = standardize(IMAGES[:N_TRAIN], IMAGES[N_TRAIN:])
TRAIN = TensorDataset(TRAIN_X, LABELS[:N_TRAIN])
TEST = TensorDataset(TEST_X, LABELS[N_TRAIN:])
loss = nn.CrossEntropyLoss()


class CompiledAdam(torch.optim.Adam):
    """Adam as the dynamo-compiled loop ran it: once a step has seen no gradient at all, no later step does anything."""

    stuck = False

    def step(self, closure=None):
        if not any(p.grad is not None for group in self.param_groups for p in group["params"]):
            self.stuck = True  # the bug, as its effect was reported: every later step is a no-op
        if self.stuck:
            return None
        return super().step(closure)


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
    return CompiledAdam(params, lr=RATE)


def evaluate(net, loader) -> float:
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
        for index, (x, y) in enumerate(doctor.watch(train_dl)):
            opt.zero_grad()  # sets every gradient to None
            if index != SKIPPED:
                batch_loss = loss(net(x), y)
                batch_loss.backward()
                doctor.after_backward(batch_loss)
            opt.step()
        evaluate(net, test_dl)
    return doctor
