"""The doctor leaves the run it watches unchanged: the same seeded loop trains the same with it and without it.

Iterating a DataLoader draws its seed from torch's default generator, shuffled or not: the doctor's evaluations
of the user's validation DataLoader (before the first step) moved every step after, and the fresh models it fits
at the report (dropout in training mode) moved whatever the user's code drew after report(). Both are read now
without drawing on the run's stream (doctor/core.py: OwnReading, and the fits under fork_rng).
"""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from doctor import Doctor

pytestmark = pytest.mark.usefixtures("one_thread")


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))


def seeded_loop(watched: bool, shuffle: bool) -> tuple[list[float], float]:
    """Two epochs of a seeded loop with dropout and a validation DataLoader: its losses, and a draw after it ends."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(512, 20, generator=generator)
    y = (x[:, 0] > 0).long()
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32, shuffle=shuffle)
    validation = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=64)
    doctor = Doctor(model, optimizer, loss_fn, validation=validation, model_factory=make_model) if watched else None
    losses = []
    for _ in range(2):
        for inputs, targets in doctor.watch(loader) if doctor else loader:
            loss = loss_fn(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            if doctor:
                doctor.after_backward(loss)
            optimizer.step()
            losses.append(loss.item())
    if doctor:
        doctor.report()
    return losses, torch.rand(1).item()  # what the user's code draws after the report


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_same_seeded_loop_gives_the_same_losses_and_draws_with_the_doctor(shuffle):
    alone, watched = seeded_loop(False, shuffle), seeded_loop(True, shuffle)
    assert watched[0] == alone[0]  # every training loss, to the bit
    assert watched[1] == alone[1]  # and the run's random stream after report()
