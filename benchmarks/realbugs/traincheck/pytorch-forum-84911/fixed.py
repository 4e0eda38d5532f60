"""TrainCheck pytorch-forum-84911, fixed: the new head, the part the optimizer holds, is left trainable.

Upstream issue: https://discuss.pytorch.org/t/obtaining-abnormal-changes-in-loss-and-accuracy/84911; TrainCheck's
reproduction silent-issue-detection/bug-reprod-scripts/pytorch-forum-84911. A pretrained EfficientNet-b0 gets a
new 100-class linear head for CIFAR-100; the Adam optimizer is given the head's parameters only, and then every
parameter whose name lacks "bn" is frozen and the head is frozen too. The only parameters left trainable (the
batch-norm scales and shifts) are not in the optimizer: the accuracy stays at chance and the loss does not fall.
The fix (TrainCheck's fixed.py), as here: the head is left trainable (the rest stays frozen, as in the fix, so the
pretrained features are fine-tuned by their new head only); the buggy program is buggy.py.

Design kept: an EfficientNet-style network (a convolution stem with batch norm, mobile inverted-bottleneck blocks
with depthwise convolutions, batch norm and swish, a 1x1 head convolution, global average pooling, dropout and a
linear `_fc`), pretrained on another task, its head replaced by a fresh Linear for the new classes;
nn.CrossEntropyLoss; Adam(model._fc.parameters(), lr=1e-3); batch size 64 without shuffling, random horizontal and
vertical flips, inputs normalized; each epoch a train pass then a validation pass in eval mode with batch size 1.
Changed: CIFAR-100 resized to 224 -> scikit-learn's digits as they are, 8x8 (10 classes, 1437 train and 360
held-out images); the rotation and colour jitter are left out (grey 8x8 images); ImageNet pretraining -> the
same network pretrained for 150 Adam steps on the training images of digits 0-4 with a 5-class head (once per run,
then copied into every fresh model); a network of 2k parameters (two blocks, expansion 2) instead of 5M; 10
epochs of 782 steps -> 30 epochs of 23 steps.
"""

import copy

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from benchmarks.realbugs.traincheck.common import N_TRAIN, digits, epochs, standardize

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/pytorch-forum-84911/fixed.py"
    " @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS = 64, 1e-3, 30
IMAGES, LABELS = digits()
TRAIN_X, TEST_X = standardize(IMAGES[:N_TRAIN], IMAGES[N_TRAIN:])
TRAIN_Y, TEST_Y = LABELS[:N_TRAIN], LABELS[N_TRAIN:]
loss = nn.CrossEntropyLoss()


class Flipped(Dataset):
    """The training images with a random horizontal and a random vertical flip, each with probability 0.5."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        image = self.x[i]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        if torch.rand(()) < 0.5:
            image = image.flip(-2)
        return image, self.y[i]


class MBConv(nn.Module):
    """A mobile inverted bottleneck: 1x1 expansion, depthwise 3x3, 1x1 projection, each with batch norm."""

    def __init__(self, inp, out, stride, expand=2):
        super().__init__()
        mid = inp * expand
        self._expand_conv = nn.Conv2d(inp, mid, 1, bias=False)
        self._bn0 = nn.BatchNorm2d(mid)
        self._depthwise_conv = nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False)
        self._bn1 = nn.BatchNorm2d(mid)
        self._project_conv = nn.Conv2d(mid, out, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(out)
        self.skip = stride == 1 and inp == out
        self.act = nn.SiLU()

    def forward(self, x):
        h = self.act(self._bn0(self._expand_conv(x)))
        h = self.act(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return x + h if self.skip else h


class EfficientNet(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self._conv_stem = nn.Conv2d(1, 8, 3, 1, 1, bias=False)
        self._bn0 = nn.BatchNorm2d(8)
        self._blocks = nn.Sequential(MBConv(8, 8, 1), MBConv(8, 16, 2))
        self._conv_head = nn.Conv2d(16, 32, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(32)
        self._dropout = nn.Dropout(0.2)
        self._fc = nn.Linear(32, n_classes)
        self.act = nn.SiLU()

    def forward(self, x):
        x = self._blocks(self.act(self._bn0(self._conv_stem(x))))
        x = self.act(self._bn1(self._conv_head(x))).mean(dim=(2, 3))
        return self._fc(self._dropout(x))


_PRETRAINED: dict = {}


def pretrained() -> nn.Module:
    """The network pretrained on digits 0-4 (5 classes), trained once per run and copied after that."""
    if "net" not in _PRETRAINED:
        net = EfficientNet(5)
        keep = TRAIN_Y < 5
        loader = DataLoader(TensorDataset(TRAIN_X[keep], TRAIN_Y[keep]), batch_size=64, shuffle=True)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        step = 0
        while step < 150:
            for x, y in loader:
                opt.zero_grad()
                nn.functional.cross_entropy(net(x), y).backward()
                opt.step()
                step += 1
        _PRETRAINED["net"] = net
    return copy.deepcopy(_PRETRAINED["net"])


def model() -> nn.Module:
    """The pretrained network with a fresh 10-class head (the transfer model)."""
    net = pretrained()
    net._fc = nn.Linear(net._fc.in_features, 10)
    return net


def batches():
    return DataLoader(Flipped(TRAIN_X, TRAIN_Y), batch_size=BATCH_SIZE, shuffle=False)


def validation():
    return DataLoader(TensorDataset(TEST_X, TEST_Y), batch_size=1, shuffle=False)


def optimizer(params):
    return torch.optim.Adam(params, lr=RATE)


def freeze(net: nn.Module) -> None:
    """The program's freezing: every parameter whose name lacks "bn"; the head is then made trainable."""
    for name, param in net.named_parameters():
        if "bn" not in name:
            param.requires_grad = False
    for param in net._fc.parameters():
        param.requires_grad = True  # the fix: the head, the part the optimizer holds, trains


def evaluate(net, loader) -> float:
    net.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (net(x).argmax(1) == y).sum().item()
    return correct / len(loader.dataset)


def train(Doctor):
    net = model()
    opt = optimizer(net._fc.parameters())
    freeze(net)
    train_dl, valid_dl = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=valid_dl)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for x, y in doctor.watch(train_dl):
            opt.zero_grad()
            batch_loss = loss(net(x), y)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
        evaluate(net, valid_dl)
    return doctor
