"""Capacity evidence for model_too_small: what a fresh copy of the model fits of the run's examples in a clean loop.

A model with room to spare fits every example of a problem a wider net generated; a bottleneck narrower than the
classes cannot, at any batching. The constant answer each task's score is measured against, the fit on a
regression, and the grid cell and the doctor both recording it.
"""

import math

import pytest
import torch
from conftest import make_config
from torch import nn

from analysis.features import features
from harness.cell import run_cell
from harness.instruments import CAPACITY_EXAMPLES, fit_capacity
from harness.instruments.memorization import NO_CAPACITY, constant_score


def teacher_problem(n=512, inputs=16, classes=10):
    """Labels a random tanh net gives random inputs: learnable by a wide student, not by a narrow one."""
    torch.manual_seed(0)
    x = torch.randn(n, inputs)
    teacher = nn.Sequential(nn.Linear(inputs, 64), nn.Tanh(), nn.Linear(64, classes))
    with torch.no_grad():
        return x, teacher(x).argmax(dim=1)


def student(hidden, inputs=16, outputs=10):
    return lambda: nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs))


def capacity_fit(fitted: dict, references_fit: float = 1.0) -> float:
    """The feature against references that fit every example (without one there is no yardstick: NaN)."""
    return features({"reference_train_acc": references_fit, **fitted})["capacity_fit"]


def test_a_wide_model_fits_every_example_and_a_bottleneck_cannot():
    x, y = teacher_problem()
    loss = nn.CrossEntropyLoss()
    wide = fit_capacity(student(128), [(x, y)], loss, rates=[1e-2], steps=200)
    narrow = fit_capacity(student(2), [(x, y)], loss, rates=[1e-2], steps=200)
    assert wide["capacity_examples"] == narrow["capacity_examples"] == 512
    assert capacity_fit(wide) > 0.99
    assert capacity_fit(narrow) < 0.8


def test_the_fit_does_not_depend_on_how_the_examples_were_batched():
    x, y = teacher_problem(n=256)
    loss = nn.CrossEntropyLoss()
    whole = fit_capacity(student(4), [(x, y)], loss, rates=[1e-2], steps=100)
    pieces = fit_capacity(student(4), [(x[:100], y[:100]), (x[100:], y[100:])], loss, rates=[1e-2], steps=100)
    assert whole["capacity_score"] == pytest.approx(pieces["capacity_score"], abs=0.02)


def test_a_regression_is_fitted_in_r2_against_always_answering_the_mean():
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = x[:, :3].pow(2).sum(dim=1, keepdim=True)
    one_unit = fit_capacity(student(1, 8, 1), [(x, y)], nn.MSELoss(), rates=[1e-2], steps=300)
    wide = fit_capacity(student(64, 8, 1), [(x, y)], nn.MSELoss(), rates=[1e-2], steps=300)
    assert one_unit["capacity_baseline"] == wide["capacity_baseline"] == 0.0
    assert capacity_fit(one_unit) < 0.5 < 0.95 < capacity_fit(wide)


@pytest.mark.parametrize(
    ("targets", "task", "expected"),
    [
        (torch.tensor([0, 0, 0, 1]), "multiclass", 0.75),
        (torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), "onehot", 0.75),
        (torch.tensor([[1.0], [0.0], [0.0], [0.0]]), "binary", 0.75),
        (torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]), "multilabel", 0.75),  # 3/4 and 3/4
        (torch.tensor([[1.5], [2.0]]), "regression", 0.0),
    ],
)
def test_the_constant_answer_scores_what_the_best_single_guess_scores(targets, task, expected):
    assert constant_score(targets, task) == pytest.approx(expected)


def test_no_capacity_fit_is_no_feature_and_one_answer_for_every_example_is_no_yardstick():
    assert math.isnan(capacity_fit(dict(NO_CAPACITY)))
    assert math.isnan(capacity_fit({"capacity_score": 1.0, "capacity_baseline": 1.0}))
    assert math.isnan(features({"capacity_score": 1.0, "capacity_baseline": 0.2})["capacity_fit"])  # no reference


def test_the_grid_cell_records_the_capacity_fit():
    cfg = make_config("fault=model_too_small", "dataset=synthetic", "loop.steps=20", "loop.eval_every=10")
    record = run_cell(cfg)
    assert record["status"] == "ok", record["error"]
    assert record["capacity_examples"] == CAPACITY_EXAMPLES
    assert record["capacity_rate"] in (1e-3, 1e-2)
    assert 0 < capacity_fit(record) < 0.9  # 4 hidden units for 10 classes (0.67-0.71 at seeds 0 and 1)


def test_the_doctor_fits_capacity_only_with_a_model_factory():
    from doctor import Doctor

    x, y = teacher_problem(n=640)
    batches = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 640, 64)]

    def diagnosed(**kwargs) -> dict:
        torch.manual_seed(0)
        net = student(2)()
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        doctor = Doctor(net, optimizer, nn.CrossEntropyLoss(), memorize_steps=100, **kwargs)
        for xb, yb in doctor.watch(batches):  # one epoch: 640 examples seen
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(net(xb), yb)
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
        doctor.finish()
        return doctor.measurements()

    with_factory = diagnosed(model_factory=student(2))
    assert with_factory["capacity_examples"] == 640  # every example seen, fewer than CAPACITY_EXAMPLES
    assert capacity_fit(with_factory) < 0.8
    assert diagnosed(model_factory=student(2), capacity_examples=128)["capacity_examples"] == 128
    assert math.isnan(diagnosed()["capacity_score"])
    assert math.isnan(diagnosed(model_factory=student(2), capacity_examples=0)["capacity_score"])
    with pytest.raises(ValueError, match="capacity_examples must be an int >= 0"):
        diagnosed(model_factory=student(2), capacity_examples=-1)
