"""Lightning backbone_image_classifier: LitClassifier, an MLP backbone classifying 28x28 digit images.

Design kept (examples/pytorch/basics/backbone_image_classifier.py): Backbone = flatten 28*28, Linear(784, 128),
ReLU, Linear(128, 10), ReLU on the output (both ReLUs functional, torch.relu; forward returns the ReLU'd scores);
LitClassifier wraps it, forward is the backbone, training_step computes F.cross_entropy(self(x), y); Adam at its
default learning_rate=0.0001 (configure_optimizers); MNIST's 60000 training images split by random_split into
55000 train and 5000 validation with a generator seeded 42; DataLoaders of batch 32 without shuffling (the
split's permutation is the only shuffle); validation_step computes the cross entropy on the validation split
after every epoch; Lightning's Trainer runs the fit, for the 50 epochs the file's run line gives
(`--trainer.max_epochs=50`). The doctor's Lightning callback (doctor/integrations/lightning.py) watches the fit
with the validation split as its validation.
Changed: the data. MNIST (28x28 grey images in [0, 1] from ToTensor) -> scikit-learn's digits (1797 images of
8x8, 10 classes): pixel values 0..16 divided by 16 to [0, 1] and resized to 28x28 with
torch.nn.functional.interpolate (bilinear); split 55:5 as the original, 1647 train and 150 validation, with the
same seeded generator. Steps: the 50 epochs of 52 batches are 2600 steps where the original takes about 86000
(1719 batches an epoch); matching them would take over half an hour on one thread, so the port keeps the
original's epochs and takes 3% of its steps. LightningCLI's seed_everything(1234) is replaced by the
benchmark's seed. Left out: the test and predict runs after fit (they read a checkpoint and do not touch the
training), and the Trainer's logger, checkpoints, progress bar and model summary (logger=False,
enable_checkpointing=False, ...: they write files or print, and change no step).
"""

import lightning as L
import torch
import torch.nn.functional as F
from common import epochs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

SOURCE = (
    "Lightning-AI/pytorch-lightning examples/pytorch/basics/backbone_image_classifier.py"
    " @ 7f0c3436cd3f6ad3753125672024fc415cbcb414"
)
HIDDEN, RATE, BATCH_SIZE, EPOCHS = 128, 0.0001, 32, 50


def digit_images() -> TensorDataset:
    """The digits as MNIST-shaped tensors: (N, 1, 28, 28) in [0, 1], and their labels."""
    digits = load_digits()
    grey = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.interpolate(grey, size=(28, 28), mode="bilinear", align_corners=False)
    return TensorDataset(images, torch.tensor(digits.target, dtype=torch.int64))


DATASET = digit_images()
VAL_SIZE = round(len(DATASET) * 5000 / 60000)
TRAIN_SET, VAL_SET = random_split(
    DATASET, [len(DATASET) - VAL_SIZE, VAL_SIZE], generator=torch.Generator().manual_seed(42)
)
loss = F.cross_entropy


class Backbone(nn.Module):
    def __init__(self, hidden_dim: int = HIDDEN):
        super().__init__()
        self.l1 = nn.Linear(28 * 28, hidden_dim)
        self.l2 = nn.Linear(hidden_dim, 10)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        x = torch.relu(self.l1(x))
        return torch.relu(self.l2(x))


class LitClassifier(L.LightningModule):
    def __init__(self, backbone: nn.Module | None = None, learning_rate: float = RATE):
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone if backbone is not None else Backbone()

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        output = F.cross_entropy(self(x), y)
        self.log("train_loss", output, on_epoch=True)
        return output

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


def model() -> nn.Module:
    return LitClassifier()


def batches():
    return DataLoader(TRAIN_SET, batch_size=BATCH_SIZE)


def validation():
    return DataLoader(VAL_SET, batch_size=BATCH_SIZE)


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

    watching = DoctorCallback(loss, **getattr(Doctor, "keywords", {}))  # validation= and model_factory=
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
    trainer.fit(model(), batches(), validation())
    if watching.report is None:
        raise CannotJudge(watching.cannot_judge or "the doctor's callback made no report")
    return keep.doctor
