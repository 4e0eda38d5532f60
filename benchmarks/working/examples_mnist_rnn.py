"""pytorch/examples mnist_rnn: an LSTM reads each digit image row by row and classifies it.

Design kept (mnist_rnn/main.py): each 28x28 image is a sequence of 28 rows of 28 values; LSTM(28, 64,
batch_first=True), its output at the last row -> BatchNorm1d(64) -> Dropout2d(0.25) -> Linear(64, 32) -> ReLU
(functional) -> Dropout2d(0.5) -> Linear(32, 10) -> log_softmax; F.nll_loss; Adadelta at lr 0.1; StepLR(step_size=1,
gamma=0.7) stepped once per epoch; training batches of 64 and test batches of 1000, both shuffled; inputs
normalized with MNIST's mean 0.1307 and std 0.3081; each epoch trains (model.train(), zero_grad, forward, loss,
backward, step) then evaluates the test set (model.eval(), no_grad, summed loss and accuracy); 14 epochs.
Changed: MNIST (60000 + 10000 images of 28x28) -> scikit-learn's digits (1797 images of 8x8, 0..16): scaled to
[0, 1] and resized to 28x28 with bilinear interpolation, then normalized with the original's constants; the first
80% (1437) train, the last 20% (360) test. The epochs are kept at 14, so the port takes 322 optimizer steps (23
batches per epoch) of the original's 13,132 (938 per epoch), 2.5%: scaling the epochs to the original's steps
would also decay the per-epoch StepLR 40 times as often, and the original's steps take several minutes here.
"""

import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/examples mnist_rnn/main.py @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
BATCH_SIZE, TEST_BATCH_SIZE, EPOCHS, RATE, GAMMA = 64, 1000, 14, 0.1, 0.7
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


class RowLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, images):
        rows = images.reshape(-1, 28, 28)  # (batch, 1, 28, 28) -> 28 steps of 28 values
        states, _ = self.rnn(rows)
        last = self.dropout1(self.batchnorm(states[:, -1, :]))
        hidden = self.dropout2(F.relu(self.fc1(last)))
        return F.log_softmax(self.fc2(hidden), dim=1)


def model() -> nn.Module:
    return RowLSTM()


def batches():
    return DataLoader(dataset(train=True), batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(dataset(train=False), batch_size=TEST_BATCH_SIZE, shuffle=True)


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
