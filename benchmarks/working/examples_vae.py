"""pytorch/examples vae: a fully connected variational autoencoder reconstructs digit images.

Design kept (vae/main.py): encoder Linear(784, 400) -> ReLU (functional) -> two heads Linear(400, 20) for the mean
and the log-variance; a sample z = mu + eps * exp(logvar / 2); decoder Linear(20, 400) -> ReLU -> Linear(400, 784)
-> sigmoid; the forward returns (reconstruction, mu, logvar); the loss is binary cross-entropy of the
reconstruction against the flattened image, summed over pixels and batch, plus the KL divergence
-0.5 * sum(1 + logvar - mu^2 - exp(logvar)); Adam at 1e-3; batches of 128 (training shuffled, test not); images
as given by ToTensor (in [0, 1], no normalization); the labels are ignored; each epoch trains (model.train(),
zero_grad, forward, loss, backward, step) then evaluates the test set's loss (model.eval(), no_grad) and decodes
64 draws of z ~ N(0, 1); 10 epochs of MNIST.
Changed: MNIST (60000 + 10000 images of 28x28) -> scikit-learn's digits (1797 images of 8x8, 0..16): scaled to
[0, 1] and resized to 28x28 with bilinear interpolation (still in [0, 1]); the first 80% (1437) train, the last
20% (360) test. The epochs: with 12 batches per epoch the original's 10 epochs would be 120 steps where it takes
4690 (469 per epoch), so the port runs 391 epochs, 4692 steps. The reconstructions and samples are not written to
PNG files.
How the doctor is told (not a change to the program): its forward returns a tuple and its loss reads four tensors,
while the doctor reads one output tensor and a loss of (output, targets). So OUTPUT = 0 (the reconstruction),
TARGETS = the flattened image (the batch's first item; the label is not the target), and the `loss` the doctor
is given for its own fits and evaluations is the reconstruction term alone (the summed binary cross-entropy);
the loop trains on the full loss and hands that to after_backward.
"""

import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SOURCE = "pytorch/examples vae/main.py @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
BATCH_SIZE, EPOCHS, RATE, LATENT = 128, 391, 1e-3, 20  # 391 epochs of 12 batches: the original 4690 steps
TRAIN_SHARE = 0.8
INPUTS = 0
TARGETS = lambda batch: batch[0].reshape(-1, 784)  # noqa: E731 - an autoencoder's target is its input
OUTPUT = 0  # (reconstruction, mu, logvar): the reconstruction


def digits_28() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as MNIST-shaped images: (N, 1, 28, 28) in [0, 1], and their labels."""
    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    big = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    return big.clamp(0.0, 1.0), torch.tensor(digits.target, dtype=torch.int64)


IMAGES, LABELS = digits_28()
CUT = int(TRAIN_SHARE * len(LABELS))


def dataset(train: bool) -> TensorDataset:
    return TensorDataset(IMAGES[:CUT], LABELS[:CUT]) if train else TensorDataset(IMAGES[CUT:], LABELS[CUT:])


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, LATENT)
        self.fc22 = nn.Linear(400, LATENT)
        self.fc3 = nn.Linear(LATENT, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        hidden = F.relu(self.fc1(x))
        return self.fc21(hidden), self.fc22(hidden)

    def sample(self, mu, logvar):
        return mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.reshape(-1, 784))
        return self.decode(self.sample(mu, logvar)), mu, logvar


def model() -> nn.Module:
    return VAE()


def batches():
    return DataLoader(dataset(train=True), batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(dataset(train=False), batch_size=BATCH_SIZE, shuffle=False)


def loss(recon, x):
    """The reconstruction term: what the doctor can compute from (output, targets)."""
    return F.binary_cross_entropy(recon, x.reshape(-1, 784), reduction="sum")


def vae_loss(recon, x, mu, logvar):
    """The program's own loss: summed reconstruction cross-entropy plus the KL divergence from N(0, 1)."""
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return loss(recon, x) + kl


def optimizer(params):
    return torch.optim.Adam(params, lr=RATE)


def test(net: VAE, loader) -> float:
    """The test set's loss per image, as the original prints it after every epoch."""
    net.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for data, _ in loader:
            recon, mu, logvar = net(data)
            total += vae_loss(recon, data, mu, logvar).item()
            count += len(data)
    return total / count


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_loader, test_loader = batches(), validation()
    doctor = Doctor(net, opt, loss, validation=test_loader)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for data, _ in doctor.watch(train_loader):
            opt.zero_grad()
            recon, mu, logvar = net(data)
            output = vae_loss(recon, data, mu, logvar)
            output.backward()
            doctor.after_backward(output)
            opt.step()
        test(net, test_loader)
        with torch.no_grad():
            net.decode(torch.randn(64, LATENT))
    return doctor
