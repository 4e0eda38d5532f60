"""The doctor leaves the run it watches unchanged: the same seeded loop trains the same with it and without it.

Iterating a DataLoader draws its seed from torch's default generator, shuffled or not: the doctor's evaluations
of the user's validation DataLoader (before the first step) moved every step after, and the fresh models it fits
at the report (dropout in training mode) moved whatever the user's code drew after report(). The first import of
scikit-learn (the quick references, at the report) draws from Python's `random` as it loads. Every random stream
is put back now (doctor/random_streams.py: streams_kept): torch's, numpy's global one and Python's.

Each loop below draws from all three in its steps (dropout, a numpy and a `random` augmentation) and after the
report, and is compared to the bit with and without the doctor: a plain loop, Lightning and the Hugging Face Trainer,
with validation and without.
"""

import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from doctor import Doctor

pytestmark = pytest.mark.usefixtures("one_thread")

_generator = torch.Generator().manual_seed(1)
X = torch.randn(512, 20, generator=_generator)
Y = (X[:, 0] > 0).long()


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))


def seed_everything() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


def augmented(inputs: torch.Tensor) -> torch.Tensor:
    """Noise from numpy's global generator, scaled by a draw of Python's: the user's augmentation."""
    return inputs + torch.from_numpy(np.random.randn(*inputs.shape)).float() * 0.05 * random.random()


def draws_after() -> tuple[float, float, float]:
    """What the user's code draws from each stream once the report is made."""
    return torch.rand(1).item(), float(np.random.rand()), random.random()


def validation_loader() -> DataLoader:
    return DataLoader(TensorDataset(X[384:], Y[384:]), batch_size=64)


def seeded_loop(watched: bool, shuffle: bool, validated: bool = True) -> tuple[list[float], tuple]:
    """Two epochs of a seeded loop with dropout and augmentation: its losses, and the draws after it ends."""
    seed_everything()
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(X[:384], Y[:384]), batch_size=32, shuffle=shuffle)
    validation = validation_loader() if validated else None
    doctor = Doctor(model, optimizer, loss_fn, validation=validation, model_factory=make_model) if watched else None
    losses = []
    for _ in range(2):
        for inputs, targets in doctor.watch(loader) if doctor else loader:
            loss = loss_fn(model(augmented(inputs)), targets)
            optimizer.zero_grad()
            loss.backward()
            if doctor:
                doctor.after_backward(loss)
            optimizer.step()
            losses.append(loss.item())
    if doctor:
        doctor.report()
    return losses, draws_after()


@pytest.mark.parametrize("validated", [True, False], ids=["validation", "no validation"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_same_seeded_loop_gives_the_same_losses_and_draws_with_the_doctor(shuffle, validated):
    alone, watched = seeded_loop(False, shuffle, validated), seeded_loop(True, shuffle, validated)
    assert watched[0] == alone[0]  # every training loss, to the bit
    assert watched[1] == alone[1]  # and each random stream after report()


# ----- Lightning ---------------------------------------------------------------------------------------------------
def lightning_run(pl, watched: bool, validated: bool) -> tuple[list[float], tuple]:
    from doctor.integrations.lightning import DoctorCallback

    class Augmented(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net, self.losses = make_model(), []

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _index):
            x, y = batch
            loss = nn.functional.cross_entropy(self(augmented(x)), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    seed_everything()
    module = Augmented()
    callbacks = []
    if watched:
        validation = validation_loader() if validated else None
        callbacks = [DoctorCallback(nn.CrossEntropyLoss(), validation=validation, model_factory=make_model)]
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=callbacks,
    )
    trainer.fit(module, DataLoader(TensorDataset(X[:384], Y[:384]), batch_size=32, shuffle=True))
    if watched:
        assert callbacks[0].report is not None
    return module.losses, draws_after()


@pytest.mark.slow
@pytest.mark.parametrize("validated", [True, False], ids=["validation", "no validation"])
def test_lightning_trains_the_same_with_the_doctor_callback(validated):
    pl = pytest.importorskip("lightning.pytorch")
    alone, watched = lightning_run(pl, False, validated), lightning_run(pl, True, validated)
    assert len(alone[0]) == 24 and watched[0] == alone[0]
    assert watched[1] == alone[1]


# ----- the Hugging Face Trainer ---------------------------------------------------------------------------------
class Rows(torch.utils.data.Dataset):
    """The rows as a Trainer dataset: one dict per example."""

    def __init__(self, inputs, labels):
        self.inputs, self.labels = inputs, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"inputs": self.inputs[index], "labels": self.labels[index]}


class Classifier(nn.Module):
    """make_model() behind the Trainer's calling convention: keyword inputs, a dict with the loss."""

    def __init__(self):
        super().__init__()
        self.net = make_model()

    def forward(self, inputs, labels=None):
        logits = self.net(augmented(inputs) if self.training else inputs)
        if labels is None:  # the doctor's own looks: no loss asked for
            return {"logits": logits}
        return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}


def trainer_run(hf, tmp_path, watched: bool, validated: bool) -> tuple[list[float], tuple]:
    from doctor.integrations.huggingface import DoctorTrainerCallback

    class Recording(hf.Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            self.losses.append(loss.item())
            return loss

    seed_everything()
    callbacks = []
    if watched:
        validation = [{"inputs": X[384:], "labels": Y[384:]}] if validated else None
        callbacks = [DoctorTrainerCallback(validation=validation, model_factory=Classifier)]
    args = hf.TrainingArguments(
        output_dir=str(tmp_path),
        num_train_epochs=2,
        per_device_train_batch_size=32,
        learning_rate=1e-2,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Recording(model=Classifier(), args=args, train_dataset=Rows(X[:384], Y[:384]), callbacks=callbacks)
    trainer.losses = []  # each training step's loss, as compute_loss returned it
    trainer.train()
    if watched:
        assert callbacks[0].report is not None, callbacks[0].cannot_judge
    return trainer.losses, draws_after()


@pytest.mark.slow
@pytest.mark.parametrize("validated", [True, False], ids=["validation", "no validation"])
def test_the_hugging_face_trainer_trains_the_same_with_the_doctor_callback(tmp_path, validated):
    hf = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    alone = trainer_run(hf, tmp_path / "alone", False, validated)
    watched = trainer_run(hf, tmp_path / "watched", True, validated)
    assert len(alone[0]) == 24 and watched[0] == alone[0]
    assert watched[1] == alone[1]
