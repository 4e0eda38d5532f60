"""The task read from targets and output, the score per task, the loss named by its values, the output's reach."""

import math

import pytest
import torch
from torch import nn

from benchmarks.realbugs import kerasport
from harness.targets import (
    Scorer,
    TaskError,
    class_labels,
    identify_loss,
    output_reach,
    output_spread,
    task_of,
    unreachable_share,
)

B = 8
torch.manual_seed(0)  # the parameters below draw random outputs at import: the same ones every run


@pytest.mark.parametrize(
    ("targets", "outputs", "task"),
    [
        (torch.arange(B) % 3, torch.randn(B, 3), "multiclass"),
        (nn.functional.one_hot(torch.arange(B) % 3, 3).float(), torch.randn(B, 3), "onehot"),
        (torch.tensor([[0.0], [1.0]] * (B // 2)), torch.randn(B, 1), "binary"),
        (torch.tensor([0, 1] * (B // 2)), torch.randn(B), "binary"),
        (torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]] * (B // 2)), torch.randn(B, 3), "multilabel"),
        (torch.randn(B, 1), torch.randn(B, 1), "regression"),
        (torch.randn(B), torch.randn(B, 1), "regression"),
        (torch.arange(B) * 3, torch.randn(B, 1), "regression"),  # integer counts from one output
    ],
    ids=["indices", "onehot", "binary-column", "binary-int", "multilabel", "regression", "regression-flat", "counts"],
)
def test_task_of_reads_each_task(targets, outputs, task):
    assert task_of(targets, outputs) == task


@pytest.mark.parametrize(
    ("targets", "outputs"),
    [
        (torch.randn(B, 2), torch.randn(B, 3)),
        (torch.arange(B), torch.randn(B + 1, 3)),
        (torch.randn(B, 4), torch.randn(B)),
    ],
    ids=["shape-mismatch", "row-mismatch", "fewer-outputs"],
)
def test_task_of_refuses_targets_that_fit_no_output(targets, outputs):
    with pytest.raises(TaskError):
        task_of(targets, outputs)


def test_class_labels_of_the_single_label_tasks():
    labels = torch.tensor([2, 0, 1, 2])
    onehot = nn.functional.one_hot(labels, 3).float()
    assert torch.equal(class_labels(onehot, "onehot"), labels)
    assert torch.equal(class_labels(torch.tensor([[1.0], [0.0]]), "binary"), torch.tensor([1, 0]))
    assert class_labels(onehot, "multilabel") is None
    assert class_labels(torch.randn(4, 1), "regression") is None


def test_scorer_accuracy_per_task_and_r2_for_regression():
    scorer = Scorer("binary")  # probabilities: cut at 0.5
    scorer.add(torch.tensor([[0.9], [0.2], [0.6], [0.4]]), torch.tensor([[1.0], [0.0], [0.0], [0.0]]))
    assert scorer.value() == 0.75
    logits = Scorer("multilabel")  # logits: cut at 0
    logits.add(torch.tensor([[2.0, -1.0], [-3.0, 4.0]]), torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
    assert logits.value() == 0.75
    perfect, mean = Scorer("regression"), Scorer("regression")
    y = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    perfect.add(y.clone(), y)
    mean.add(torch.full_like(y, 2.5), y)
    assert perfect.value() == 1.0 and mean.value() == 0.0


@pytest.mark.parametrize(
    ("loss_fn", "outputs", "targets", "kind"),
    [
        (nn.CrossEntropyLoss(), torch.randn(B, 3), torch.arange(B) % 3, "cross_entropy"),
        (
            nn.CrossEntropyLoss(),
            torch.randn(B, 3),
            nn.functional.one_hot(torch.arange(B) % 3, 3).float(),
            "cross_entropy",
        ),
        (nn.NLLLoss(), torch.randn(B, 3).log_softmax(1), torch.arange(B) % 3, "nll"),
        (nn.MSELoss(), torch.randn(B, 1), torch.randn(B, 1), "mse"),
        (nn.L1Loss(), torch.randn(B, 1), torch.randn(B, 1), "l1"),
        (nn.BCEWithLogitsLoss(), torch.randn(B, 1), torch.ones(B, 1), "bce_logits"),
        (nn.BCELoss(), torch.rand(B, 1), torch.ones(B, 1), "bce"),
        (kerasport.binary_crossentropy, torch.rand(B, 1), torch.ones(B, 1), "bce"),
        (nn.CrossEntropyLoss(label_smoothing=0.2), torch.randn(B, 3), torch.arange(B) % 3, "other"),
        (lambda out, y: 2 * nn.functional.mse_loss(out, y), torch.randn(B, 1), torch.randn(B, 1), "other"),
        # A fresh model's nearly equal outputs: every loss of a uniform guess gives about ln 3 there.
        (nn.CrossEntropyLoss(), 0.01 * torch.randn(B, 3), torch.arange(B) % 3, "cross_entropy"),
        (
            kerasport.categorical_crossentropy,  # renormalizes the sigmoids: no softmax of logits
            torch.sigmoid(0.01 * torch.randn(B, 3)),
            nn.functional.one_hot(torch.arange(B) % 3, 3).float(),
            "other",
        ),
        (nn.CrossEntropyLoss(), torch.randn(B, 3).bfloat16(), torch.arange(B) % 3, "cross_entropy"),  # autocast
    ],
    ids=[
        "ce",
        "ce-probability-rows",
        "nll",
        "mse",
        "l1",
        "bce-logits",
        "bce",
        "keras-bce",
        "smoothed-ce",
        "scaled-mse",
        "ce-near-uniform",
        "keras-cce-on-near-uniform-sigmoids",
        "ce-bfloat16",
    ],
)
def test_identify_loss_names_the_loss_by_its_value(loss_fn, outputs, targets, kind):
    assert identify_loss(loss_fn, outputs, targets) == kind


def test_output_reach_of_a_sigmoid_misses_targets_below_zero_and_a_linear_output_reaches_them():
    torch.manual_seed(0)
    x = torch.randn(32, 3)
    targets = torch.linspace(-2, 2, 32).unsqueeze(1)
    bounded = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    linear = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    gap = unreachable_share(targets, *output_reach(bounded, x))
    assert 0.7 < gap < 0.8  # the 24 of 32 targets outside [0, 1]
    assert unreachable_share(targets, *output_reach(linear, x)) == 0.0
    # A softmax's rows always sum to 1: multi-hot rows are out of its reach, one-hot rows are not.
    softmax = nn.Sequential(nn.Linear(3, 3), nn.Softmax(dim=-1))
    multi_hot = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]] * 16)
    assert unreachable_share(multi_hot, *output_reach(softmax, x)) == 0.5


def test_output_spread_is_zero_for_a_softmax_over_one_unit():
    x = torch.randn(16, 3)
    assert output_spread(nn.Sequential(nn.Linear(3, 1), nn.Softmax(dim=-1))(x)) == 0.0
    assert output_spread(nn.Linear(3, 1)(x)) > 0.1
    assert math.isnan(output_spread(torch.ones(1, 1)))
