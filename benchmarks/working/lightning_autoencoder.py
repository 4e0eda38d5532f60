"""Lightning README LitAutoEncoder: an MLP autoencoder squeezes 28x28 digit images through 3 numbers and back.

Design kept (README.md, "PyTorch Lightning example"): encoder Linear(28*28, 128), ReLU, Linear(128, 3); decoder
Linear(3, 128), ReLU, Linear(128, 28*28); forward returns the encoder's embedding (the README's inference
action); training_step takes (x, label), flattens x, decodes the encoding and returns F.mse_loss(x_hat, x), the
reconstruction against the input itself (the label is not used); Adam at 1e-3; MNIST's 60000 training images
split 55000/5000 by random_split; DataLoader(train) and DataLoader(val) with the defaults: batch 1, no shuffling;
L.Trainer() with its defaults (max_epochs 1000); the module has no validation_step, so Lightning skips the
validation loader and nothing held out is scored. The doctor's Lightning callback (doctor/integrations/lightning.py)
watches the fit with the loss as training_step computes it (F.mse_loss) and, as docs/doctor.md says to do when
it cannot tell, is told where a batch keeps its inputs and targets: both are the flattened image
(INPUTS, TARGETS: Doctor's inputs=, targets=), since the targets of a reconstruction are its inputs.
Changed: the data. MNIST (28x28 grey images in [0, 1] from ToTensor) -> scikit-learn's digits (1797 images of
8x8): pixel values 0..16 divided by 16 to [0, 1] and resized to 28x28 with torch.nn.functional.interpolate
(bilinear); split 55:5 as the original, 1647 train and 150 validation images. Epochs cut from the Trainer's
default 1000 to 3 (batch 1: 1647 steps an epoch, 4941 steps in all) for CPU time. The Trainer's logger,
checkpoints, progress bar and model summary are off (they write files or print and change no step).
"""

import lightning as L
import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

SOURCE = "Lightning-AI/pytorch-lightning README.md @ 7f0c3436cd3f6ad3753125672024fc415cbcb414"
RATE, EPOCHS = 1e-3, 3


def digit_images() -> TensorDataset:
    """The digits as MNIST-shaped tensors: (N, 1, 28, 28) in [0, 1], and their labels."""
    digits = load_digits()
    grey = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.interpolate(grey, size=(28, 28), mode="bilinear", align_corners=False)
    return TensorDataset(images, torch.tensor(digits.target, dtype=torch.int64))


DATASET = digit_images()
VAL_SIZE = round(len(DATASET) * 5000 / 60000)
TRAIN_SET, VAL_SET = random_split(DATASET, [len(DATASET) - VAL_SIZE, VAL_SIZE])  # the seeded global generator
loss = F.mse_loss


def flat_images(batch):
    """Where a batch keeps what the autoencoder reads and rebuilds: the image, flattened as training_step does."""
    x, _ = batch
    return x.view(x.size(0), -1)


INPUTS = TARGETS = flat_images  # the recipe's way of saying Doctor(..., inputs=flat_images, targets=flat_images)


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 128), nn.ReLU(), nn.Linear(128, 28 * 28))

    def forward(self, x):
        return self.encoder(x)

    def training_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        output = F.mse_loss(x_hat, x)
        self.log("train_loss", output)
        return output

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=RATE)


def model() -> nn.Module:
    return LitAutoEncoder()


def batches():
    return DataLoader(TRAIN_SET)


def optimizer(params):
    return torch.optim.Adam(params, lr=RATE)


class KeepDoctor(L.Callback):
    """Keeps the Doctor the doctor's callback builds at fit start, to hand it back to the benchmark."""

    def __init__(self, watching):
        self.watching, self.doctor = watching, None

    def on_train_start(self, trainer, pl_module):
        self.doctor = self.watching.doctor


def train(Doctor):
    from doctor.integrations.lightning import DoctorCallback
    from doctor.refusals import CannotJudge

    # model_factory=, inputs= and targets= (INPUTS, TARGETS); no validation: the original scores nothing held out
    watching = DoctorCallback(loss, **getattr(Doctor, "keywords", {}))
    keep = KeepDoctor(watching)
    trainer = L.Trainer(
        max_epochs=epochs(EPOCHS),
        accelerator="cpu",
        devices=1,
        callbacks=[watching, keep],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model(), batches(), DataLoader(VAL_SET))
    if watching.report is None:
        raise CannotJudge(watching.cannot_judge or "the doctor's callback made no report")
    return keep.doctor
