"""pytorch/examples mnist: a two-convolution CNN classifies handwritten digits with Adadelta and a per-epoch StepLR.

Design kept (mnist/main.py): Conv2d(1, 32, 3) -> ReLU -> Conv2d(32, 64, 3) -> ReLU -> max-pool 2 -> Dropout(0.25)
-> flatten (9216) -> Linear(9216, 128) -> ReLU -> Dropout(0.5) -> Linear(128, 10) -> log_softmax, the ReLUs and
the pooling as functional calls; F.nll_loss; Adadelta at lr 1.0; StepLR(step_size=1, gamma=0.7) stepped once per
epoch; training batches of 64 and test batches of 1000, not shuffled (the original shuffles only on an
accelerator; this is its CPU path); inputs normalized with MNIST's mean 0.1307 and std 0.3081; each epoch trains
(model.train(), zero_grad, forward, loss, backward, step) then evaluates the test set (model.eval(), no_grad, summed
loss and accuracy); 14 epochs.
Changed: MNIST (60000 + 10000 images of 28x28) -> scikit-learn's digits (1797 images of 8x8, 0..16): scaled to
[0, 1] and resized to 28x28 with bilinear interpolation, then normalized with the original's constants; the first
80% (1437) train, the last 20% (360) test, in the dataset's own order. The epochs are kept at 14, so the port
takes 322 optimizer steps (23 batches per epoch) of the original's 13,132 (938 per epoch), 2.5%: scaling the epochs
to the original's steps would also decay the per-epoch StepLR 40 times as often, and would take far more than a
minute on one thread (a run under the doctor took 17 minutes on one thread of a loaded 2-core host, most of it the
doctor's own fits of fresh copies of this CNN).
"""

import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/examples mnist/main.py @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
BATCH_SIZE, TEST_BATCH_SIZE, EPOCHS, RATE, GAMMA = 64, 1000, 14, 1.0, 0.7
MEAN, STD = 0.1307, 0.3081
TRAIN_SHARE = 0.8


def digits_28() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as MNIST-shaped images: (N, 1, 28, 28) in [0, 1], and their labels."""
    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    big = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    return big, torch.tensor(digits.target, dtype=torch.int64)


IMAGES, LABELS = digits_28()
CUT = int(TRAIN_SHARE * len(LABELS))


def dataset(train: bool) -> TensorDataset:
    images, labels = (IMAGES[:CUT], LABELS[:CUT]) if train else (IMAGES[CUT:], LABELS[CUT:])
    return TensorDataset((images - MEAN) / STD, labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(self.dropout2(x))
        return F.log_softmax(x, dim=1)


def model() -> nn.Module:
    return Net()


def batches():
    return DataLoader(dataset(train=True), batch_size=BATCH_SIZE)


def validation():
    return DataLoader(dataset(train=False), batch_size=TEST_BATCH_SIZE)


loss = F.nll_loss


def optimizer(params):
    return torch.optim.Adadelta(params, lr=RATE)


def test(net: nn.Module, loader) -> tuple[float, float]:
    """The test set's mean loss and accuracy, as the original prints them after every epoch."""
    net.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for data, target in loader:
            output = net(data)
            total += F.nll_loss(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
            count += len(target)
    return total / count, correct / count


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_loader, test_loader = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=test_loader)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=GAMMA)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for data, target in doctor.watch(train_loader):
            opt.zero_grad()
            output = loss(net(data), target)
            output.backward()
            doctor.after_backward(output)
            opt.step()
        test(net, test_loader)
        scheduler.step()
    return doctor
