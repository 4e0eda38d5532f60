"""The doctor on the tasks beyond class indices: regression, one-unit binary, multi-label and one-hot targets.

Each task has a healthy recipe that must be called healthy and the output bug real programs have: a softmax over
one unit (the same output for every input), a sigmoid in front of regression targets it cannot reach, a softmax
cross-entropy on multi-label rows, a sigmoid or tanh in front of cross-entropy.
"""

import math

import pytest
import torch
from torch import nn

from analysis.features import features
from analysis.rules import diagnose
from doctor.probe_loop import probe

N = 512


HELD_OUT = 128  # examples after the first N: validation never holds a copy of a training example (validation_copies)


def data(task: str):
    """Inputs and targets of one generated problem per task (the same inputs every time): N to train, then HELD_OUT."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N + HELD_OUT, 4, generator=generator)
    score = x @ torch.tensor([1.5, -1.0, 0.5, 0.0])
    if task == "regression":
        return x, (3 * score + 2).unsqueeze(1)  # targets well outside [0, 1]
    if task == "binary":
        return x, (score > 0).float().unsqueeze(1)
    if task == "onehot":
        return x, nn.functional.one_hot((score > 0).long() + (score > 1).long(), 3).float()
    if task == "multiclass":
        return x, (score > 0).long() + (score > 1).long()  # 3 classes, as indices
    return x, torch.stack([score > 0, x[:, 1] > 0, x[:, 2] + x[:, 0] > 0], dim=1).float()  # multilabel


def held_out(x, y) -> list:
    """The validation batch: the examples after the first N, which no training batch holds."""
    return [(x[N:], y[N:])]


def run(task: str, head: list[nn.Module], loss: nn.Module, outputs: int, steps: int = 400):
    x, y = data(task)

    def model():
        return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, outputs), *head)

    def batches():
        order = torch.randperm(N)
        return [(x[order[i : i + 32]], y[order[i : i + 32]]) for i in range(0, N, 32)]

    return probe(model, batches, loss, lambda p: torch.optim.Adam(p, lr=1e-2), steps=steps, validation=held_out(x, y))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "head", "loss", "outputs"),
    [
        ("regression", [], nn.MSELoss(), 1),
        ("binary", [], nn.BCEWithLogitsLoss(), 1),
        ("onehot", [], nn.CrossEntropyLoss(), 3),
        ("multilabel", [], nn.BCEWithLogitsLoss(), 3),
    ],
    ids=["regression", "binary", "onehot", "multilabel"],
)
def test_a_healthy_run_of_each_task_is_called_healthy(task, head, loss, outputs):
    report = run(task, head, loss, outputs)
    assert report.measurements["task"] == task
    assert report.verdict == "healthy", str(report)
    assert report.measurements["final_val_acc"] > 0.9  # accuracy, or R² for regression


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "head", "loss", "outputs", "verdict"),
    [
        ("binary", [nn.Softmax(dim=-1)], nn.BCELoss(), 1, "constant_output"),  # a softmax over one unit is always 1
        ("regression", [nn.Sigmoid()], nn.MSELoss(), 1, "unreachable_targets"),
        ("multilabel", [], nn.CrossEntropyLoss(), 3, "unreachable_targets"),  # the loss's softmax: rows sum to 1
        ("onehot", [], nn.BCEWithLogitsLoss(), 3, "bce_on_single_label"),  # a yes/no per class for one of 3
        ("onehot", [nn.Sigmoid()], nn.BCELoss(), 3, "bce_on_single_label"),  # Keras: sigmoid + binary_crossentropy
        ("multiclass", [nn.Sigmoid()], nn.CrossEntropyLoss(), 3, "squashed_logits"),  # logits kept 1 apart
        ("onehot", [nn.Tanh()], nn.CrossEntropyLoss(), 3, "squashed_logits"),  # 2 apart, on probability rows
    ],
    ids=[
        "softmax-over-one-unit",
        "sigmoid-on-regression",
        "softmax-cross-entropy-on-multilabel",
        "bce-logits-on-one-hot",
        "sigmoid-bce-on-one-hot",
        "sigmoid-before-cross-entropy",
        "tanh-before-cross-entropy-on-one-hot",
    ],
)
def test_an_output_that_cannot_fit_the_targets_is_named(task, head, loss, outputs, verdict):
    report = run(task, head, loss, outputs)
    assert verdict in [f.verdict for f in report.findings], str(report)


@pytest.mark.parametrize(
    ("loss_kind", "task", "ln_classes", "value"),
    [
        ("bce_logits", "onehot", math.log(3), 1.0),
        ("bce", "onehot", math.log(69), 1.0),
        ("bce_logits", "onehot", math.log(2), 0.0),  # two sigmoids on two-class rows: a proper model of one label
        ("bce_logits", "multilabel", math.log(2), 0.0),  # what binary cross-entropy is for
        ("cross_entropy", "onehot", math.log(10), 0.0),
        ("bce_logits", "unknown", math.log(3), math.nan),
        ("mse", "regression", 1e4, 0.0),  # ln_classes holds a regression's target variance: here a huge one
    ],
)
def test_single_label_bce_reads_the_loss_against_the_targets_coding(loss_kind, task, ln_classes, value):
    measurements = {"loss_kind": loss_kind, "task": task, "ln_classes": ln_classes}
    measured = features(measurements)["single_label_bce"]
    assert measured == value or (math.isnan(value) and math.isnan(measured))
    assert diagnose(measurements, thresholds={"bce_on_single_label": 0.5})  # the evidence fields do not overflow


class SigmoidInForward(nn.Module):
    """The sigmoid written in forward, not as a module: only the values can show it."""

    def __init__(self, squash: bool):
        super().__init__()
        self.hidden, self.head, self.squash = nn.Linear(4, 32), nn.Linear(32, 3), squash

    def forward(self, x):
        logits = self.head(torch.relu(self.hidden(x)))
        return torch.sigmoid(logits) if self.squash else logits


@pytest.mark.slow
@pytest.mark.parametrize("squash", [False, True], ids=["logits", "torch.sigmoid-in-forward"])
def test_a_sigmoid_in_forward_before_cross_entropy_is_read_from_the_outputs_reach(squash):
    x, y = data("multiclass")
    report = probe(
        lambda: SigmoidInForward(squash),
        lambda: [(x[i : i + 32], y[i : i + 32]) for i in range(0, N, 32)],
        nn.CrossEntropyLoss(),
        lambda p: torch.optim.Adam(p, lr=1e-2),
        steps=400,
        validation=held_out(x, y),
    )
    span = report.measurements["logit_reach_span"]
    if squash:
        assert span <= 1.0 and report.verdict == "squashed_logits", str(report)
    else:
        assert span > 100 and report.verdict == "healthy", str(report)


@pytest.mark.slow
def test_binary_cross_entropy_on_two_class_one_hot_rows_is_called_healthy():
    x, _ = data("onehot")
    y = nn.functional.one_hot((x @ torch.tensor([1.5, -1.0, 0.5, 0.0]) > 0).long(), 2).float()
    order = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    report = probe(
        lambda: nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2)),
        lambda: [(x[order[i : i + 32]], y[order[i : i + 32]]) for i in range(0, N, 32)],
        nn.BCEWithLogitsLoss(),
        lambda p: torch.optim.Adam(p, lr=1e-2),
        steps=400,
        validation=held_out(x, y),
    )
    assert report.measurements["task"] == "onehot" and report.measurements["loss_kind"] == "bce_logits"
    assert report.verdict == "healthy", str(report)


@pytest.mark.parametrize(
    ("curve", "share"),
    [
        ([2.3 * 0.9**t + 0.05 for t in range(200)], (-0.01, 0.01)),  # converged: the last fifth brings nothing
        ([2.3 - 0.01 * t for t in range(200)], (0.2, 0.25)),  # falling in a straight line until the end
        ([2.3] * 150 + [2.3 - 0.04 * t for t in range(50)], (0.6, 1.0)),  # a plateau left at the very end
        ([2.3] * 200, (float("nan"), float("nan"))),  # nothing fell: not "still improving"
    ],
    ids=["converged", "linear", "late-drop", "flat"],
)
def test_late_drop_share_reads_how_much_of_the_fall_came_last(curve, share):
    value = features({"train_loss_curve": curve})["late_drop_share"]
    if math.isnan(share[0]):
        assert math.isnan(value)
    else:
        assert share[0] <= value <= share[1]


@pytest.mark.slow
def test_a_model_whose_outputs_are_not_finite_has_no_logit_reach_to_read():
    x, y = data("multiclass")

    def model():
        net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
        nn.init.constant_(net[2].bias, math.inf)  # weights gone to inf: every output inf or NaN
        return net

    report = probe(
        model,
        lambda: [(x[i : i + 32], y[i : i + 32]) for i in range(0, N, 32)],
        nn.CrossEntropyLoss(),
        lambda p: torch.optim.Adam(p, lr=1e-2),
        steps=20,
        validation=held_out(x, y),
    )
    assert math.isnan(report.measurements["logit_reach_span"])  # not -inf, which would read as squashed
    assert "squashed_logits" not in [f.verdict for f in report.findings]


@pytest.mark.slow
@pytest.mark.parametrize("head", [[], [nn.Tanh()]], ids=["linear", "tanh-out-of-reach"])
def test_a_regression_report_speaks_in_r2_never_in_accuracy(head):
    """Every line of a regression run's report (findings, warnings, checklist) names R², not accuracy or ln C."""
    report = run("regression", head, nn.MSELoss(), 1)
    text = str(report)
    assert "accuracy" not in text and "ln C" not in text and "nan%" not in text.lower(), text
    assert "validation R² " in text  # the checklist's "it learns" line, in the task's own metric
    if head:  # the tanh keeps every output within 1 of 0: most targets out of reach
        assert report.verdict == "unreachable_targets", text
