"""The run's own yardsticks: the baseline, the references, label consistency and the class mix, on known data."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from harness.instruments import Instruments
from harness.reference import reference_fit


def blobs(n: int, classes: int = 3, seed: int = 0):
    """Gaussian features labelled by a fixed linear rule (the class whose direction scores highest).

    Every draw shares the rule: a task any reference learns, with no clusters that a shuffled label could
    still hand whole to one class.
    """
    directions = np.random.default_rng(99).normal(size=(4, classes))
    x = np.random.default_rng(seed).normal(size=(n, 4))
    return torch.tensor(x, dtype=torch.float32), torch.tensor((x @ directions).argmax(axis=1))


def test_clean_labels_agree_on_training_and_validation_and_share_the_class_mix():
    (x, y), (vx, vy) = blobs(600), blobs(300, seed=1)
    found = reference_fit(x, y, vx, vy)
    assert found["reference_val_acc"] > 0.9 and found["reference_loo_acc"] > 0.9
    assert found["baseline_val_acc"] == pytest.approx(max(np.bincount(vy.numpy()) / len(vy)), abs=0.1)
    assert found["prior_shift"] < 1.3 and found["reference_examples"] == 600 and found["reference_val_examples"] == 300


def test_shuffled_training_labels_leave_every_reference_at_the_baseline():
    (x, y), (vx, vy) = blobs(600), blobs(300, seed=1)
    found = reference_fit(x, y[torch.randperm(600, generator=torch.Generator().manual_seed(0))], vx, vy)
    assert found["reference_val_acc"] < found["baseline_val_acc"] + 0.1


def test_wrong_training_labels_lower_the_training_agreement_only():
    (x, y), (vx, vy) = blobs(600), blobs(300, seed=1)
    noisy = y.clone()
    noisy[:180] = torch.randint(0, 3, (180,), generator=torch.Generator().manual_seed(0))  # 30% drawn again
    clean, found = reference_fit(x, y, vx, vy), reference_fit(x, noisy, vx, vy)

    def gap(fit):  # how much worse the neighbours agree with the training labels than with validation
        return fit["reference_knn_val_acc"] - fit["reference_loo_acc"]

    assert gap(found) > gap(clean) + 0.1


def test_a_class_rarer_in_training_than_in_validation_is_a_shift():
    (x, y), (vx, vy) = blobs(900), blobs(300, seed=1)
    keep = (y != 2) | (torch.arange(900) % 10 == 0)  # class 2 keeps a tenth of its examples
    found = reference_fit(x[keep], y[keep], vx, vy)
    share = (y == 2).float().mean().item()  # class 2's share in validation and before the filter
    assert found["prior_shift"] == pytest.approx(10 * (1 - 0.9 * share), rel=0.25)


def test_without_validation_a_quarter_is_held_out_and_no_shift_is_claimed():
    x, y = blobs(400)
    found = reference_fit(x, y)
    assert found["reference_val_examples"] == 100 and found["reference_examples"] == 300
    assert math.isnan(found["prior_shift"]) and found["reference_val_acc"] > 0.85


def test_the_instruments_keep_each_training_example_once_and_census_early_steps():
    x, y = blobs(40)
    model = nn.Linear(4, 3)
    instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy)
    for epoch in range(3):  # the same 40 examples three times
        for xb, yb in instruments.watch([(x[i : i + 10], y[i : i + 10]) for i in range(0, 40, 10)]):
            loss = nn.functional.cross_entropy(model(xb), yb)
            instruments.optimizer.zero_grad()
            loss.backward()
            instruments.after_backward(loss)
            instruments.optimizer.step()
        del epoch
    kept_x, kept_y = instruments.kept_examples()
    assert torch.equal(kept_x, x) and torch.equal(kept_y, y)
    assert [s for s in range(120) if instruments.is_census_step(s)] == [0, 1, 2, 4, 8, 16, 32, 50, 100]
