"""pytorch/tutorials cifar10_tutorial: a LeNet-like CNN classifies 3x32x32 images into 10 classes.

Design kept (beginner_source/blitz/cifar10_tutorial.py): Net = conv 3->6 (5x5), ReLU, 2x2 max-pool, conv 6->16
(5x5), ReLU, 2x2 max-pool, flatten (16*5*5), fc 400->120, ReLU, fc 120->84, ReLU, fc 84->10 (logits; the ReLUs
are functional calls); nn.CrossEntropyLoss; SGD at lr 0.001, momentum 0.9; batch 4, the training set shuffled
each epoch by a DataLoader with num_workers=2; 2 epochs, optimizer.zero_grad() then forward, backward, step;
inputs scaled to [-1, 1] (ToTensor to [0, 1], then Normalize with mean 0.5 and std 0.5 per channel); the test
set (batch 4, not shuffled) scored after training.
Changed: the data. CIFAR-10 (50000 training and 10000 test colour images of 32x32) -> scikit-learn's digits
(1797 grey images of 8x8, 10 classes): pixel values 0..16 divided by 16 to [0, 1], resized to 32x32 with
torch.nn.functional.interpolate (bilinear), the one grey channel copied to three channels, then normalized as
the original normalizes (x - 0.5) / 0.5; a stratified split of 1/6 held out as the test set (CIFAR-10's 10000 of
60000), 1497 training and 300 test images. The epochs, model, optimizer and batch size are the original's. The
test set is the doctor's validation (the original scores its accuracy after training). Steps: the 2 epochs are
750 steps where the original takes 25000 (CIFAR-10's 50000 images in batches of 4); matching them would take
about half an hour on one thread at the rate measured here (a 750-step run takes about a minute), so the port
keeps the original's epochs and takes 3% of its steps: it trains less than the original does.
"""

import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/tutorials beginner_source/blitz/cifar10_tutorial.py @ c53e7d4efc0e39e455c531d21ec7db28ba220214"
BATCH_SIZE, RATE, MOMENTUM, EPOCHS, WORKERS = 4, 0.001, 0.9, 2, 2


def colour_images() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as CIFAR-10-shaped tensors: (N, 3, 32, 32) in [-1, 1], and their labels."""
    digits = load_digits()
    grey = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    grey = F.interpolate(grey, size=(32, 32), mode="bilinear", align_corners=False)
    images = grey.repeat(1, 3, 1, 1)
    return (images - 0.5) / 0.5, torch.tensor(digits.target, dtype=torch.int64)


IMAGES, LABELS = colour_images()
TRAIN_X, TEST_X, TRAIN_Y, TEST_Y = (
    torch.as_tensor(a)
    for a in train_test_split(IMAGES.numpy(), LABELS.numpy(), test_size=300, stratify=LABELS.numpy(), random_state=0)
)
loss = nn.CrossEntropyLoss()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def model() -> nn.Module:
    return Net()


def batches():
    return DataLoader(TensorDataset(TRAIN_X, TRAIN_Y), batch_size=BATCH_SIZE, shuffle=True, num_workers=WORKERS)


def validation():
    return DataLoader(TensorDataset(TEST_X, TEST_Y), batch_size=BATCH_SIZE, shuffle=False, num_workers=WORKERS)


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE, momentum=MOMENTUM)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss)
    loader = batches()
    for _ in range(epochs(EPOCHS)):
        for inputs, labels in doctor.watch(loader):
            opt.zero_grad()
            outputs = net(inputs)
            output = loss(outputs, labels)
            output.backward()
            doctor.after_backward(output)
            opt.step()
    return doctor
