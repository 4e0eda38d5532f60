"""pytorch/tutorials quickstart: a 512-512 ReLU MLP classifies 28x28 grey images into 10 classes.

Design kept (beginner_source/basics/quickstart_tutorial.py): nn.Flatten, then Linear(784, 512), ReLU,
Linear(512, 512), ReLU, Linear(512, 10) giving logits (this commit has no ReLU after the last layer);
nn.CrossEntropyLoss; torch.optim.SGD at lr 1e-3, no momentum; batch size 64, DataLoader without shuffling (the
tutorial passes no shuffle=); 5 epochs, each a train() pass (model.train(), forward, loss, backward,
optimizer.step(), optimizer.zero_grad()) followed by a test() pass over the held-out set in eval mode under
no_grad (its loss and accuracy).
Changed: the data. FashionMNIST (60000 train, 10000 test images, 28x28 grey in [0, 1]) -> scikit-learn's digits
(1797 images 8x8, 16 grey levels) scaled to [0, 1] and resized to 28x28 (bilinear), 10 classes; the first 1437
images train, the last 360 are the test set. The epochs: with 23 batches per epoch the tutorial's 5 epochs would
be 115 steps where the original takes about 4690 (the data is 40 times smaller), so the port runs 204 epochs,
4692 steps: the original's training per weight (the benchmark's rule, benchmarks/working/__main__.py).
"""

import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/tutorials beginner_source/basics/quickstart_tutorial.py @ afcd669d56554c2ef46f2da92edbfaf8c54043ec"
BATCH_SIZE, RATE, EPOCHS, N_TRAIN = 64, 1e-3, 204, 1437  # 204 epochs of 23 batches: the original 4690 steps
loss = nn.CrossEntropyLoss()


def digits_28() -> tuple[torch.Tensor, torch.Tensor]:
    """Scikit-learn's digits as (N, 1, 28, 28) floats in [0, 1] and their int64 labels: the shape ToTensor() gives."""
    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    return images, torch.tensor(digits.target, dtype=torch.int64)


IMAGES, LABELS = digits_28()
TRAIN = TensorDataset(IMAGES[:N_TRAIN], LABELS[:N_TRAIN])
TEST = TensorDataset(IMAGES[N_TRAIN:], LABELS[N_TRAIN:])


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


def model() -> nn.Module:
    return NeuralNetwork()


def batches():
    return DataLoader(TRAIN, batch_size=BATCH_SIZE)


def validation():
    return DataLoader(TEST, batch_size=BATCH_SIZE)


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE)


def test(dataloader, net, loss_fn) -> tuple[float, float]:
    """The held-out pass after each epoch: mean batch loss and accuracy."""
    net.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for x, y in dataloader:
            pred = net(x)
            total += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).sum().item()
    return total / len(dataloader), correct / len(dataloader.dataset)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_dl, test_dl = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=test_dl)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for x, y in doctor.watch(train_dl):
            pred = net(x)
            batch_loss = loss(pred, y)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
            opt.zero_grad()
        test(test_dl, net, loss)
    return doctor
