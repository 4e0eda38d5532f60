"""The example axis is decided once per run, and the quick references are judged only on enough examples.

Enough means distinct examples, and for a check that reads one class's share, enough of that class.

A sequence-first loop at batch size 1 (the char-RNN tutorial: a name as a (letters, 1, features) stack, one target)
has one example per batch, not one per letter; a one-letter name happens to have as many input rows as targets,
which must not make the doctor fit references on the one-letter names alone. And references scored on a handful
of held-out examples are noise: the checks resting on them are not judged, and the report says so.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from analysis.features import REFERENCE_FLOOR, RESTS_ON_REFERENCES, features
from analysis.yardsticks import PER_CLASS_FLOOR
from doctor import Doctor
from harness.reference import reference_fit


class LetterRNN(nn.Module):
    """Reads a (letters, 1, features) stack letter by letter; the class from the last hidden state."""

    def __init__(self, features=5, classes=3):
        super().__init__()
        self.rnn, self.head = nn.RNN(features, 16), nn.Linear(16, classes)

    def forward(self, letters):
        _, hidden = self.rnn(letters)
        return self.head(hidden[-1])


def names(count, seed=0):
    """(letters, 1, 5) one-hot stacks of 1 to 6 letters, every fourth one letter long, with a class each."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(count):
        length = 1 if i % 4 == 0 else int(torch.randint(2, 7, (1,), generator=generator))
        letters = torch.randint(0, 5, (length,), generator=generator)
        batches.append((F.one_hot(letters, 5).float().unsqueeze(1), letters[-1:] % 3))
    return batches


def trained(model, optimizer, batches, epochs=1, validation=None):
    """A plain cross-entropy loop with the doctor's three lines; the doctor's report."""
    doctor = Doctor(model, optimizer, F.cross_entropy, validation=validation)
    for _ in range(epochs):
        for x, y in doctor.watch(batches):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    return doctor.report()


def test_a_sequence_first_batch_of_one_is_never_read_as_letters():
    model = LetterRNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    report = trained(model, optimizer, names(200))
    # The first batch is one letter (rows match); the second is not: nothing is kept, the one-letter names included.
    assert report.measurements["reference_examples"] == 0
    assert "sequence first" in report.note and "label_noise" in report.note
    assert "examples not the inputs' rows" in report.read_as and "read as: the loss: cross_entropy" in str(report)
    assert report.verdict not in ("label_noise", "shuffled_labels", "class_imbalance", "model_too_small")


def test_references_on_too_few_held_out_examples_are_not_judged():
    torch.manual_seed(0)
    inputs, labels = torch.randn(12, 6), torch.arange(12) % 3  # twelve examples, a batch of one: 3 held out
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    report = trained(model, optimizer, [(inputs[i : i + 1], labels[i : i + 1]) for i in range(12)], epochs=10)
    assert 0 < report.measurements["reference_val_examples"] < REFERENCE_FLOOR
    assert f"fewer than {REFERENCE_FLOOR}" in report.note and "shuffled_labels" in report.note
    assert all(math.isnan(report.features[name]) for name in RESTS_ON_REFERENCES)
    assert report.verdict not in ("label_noise", "shuffled_labels", "unexplained_failure")


def test_the_floor_leaves_runs_with_enough_held_out_examples_alone():
    enough = {
        "task": "multiclass",
        "n_classes": 3,
        "majority_share": 0.4,
        "baseline_val_acc": 0.4,
        "reference_val_acc": 0.9,
        "final_val_acc": 0.5,
        "reference_val_examples": REFERENCE_FLOOR,
    }
    assert features(enough)["skill_shortfall"] > 0.5
    assert math.isnan(features({**enough, "reference_val_examples": REFERENCE_FLOOR - 1})["skill_shortfall"])


def blobs(count, classes=3, seed=0, counts=None):
    """`count` points around one centre per class (or `counts[k]` of class k), labels in class order."""
    generator = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(classes, 6, generator=torch.Generator().manual_seed(99))
    labels = torch.arange(count) % classes if counts is None else torch.repeat_interleave(torch.tensor(counts))
    return centres[labels] + torch.randn(len(labels), 6, generator=generator), labels


def mlp_run(validation, train=None):
    """A small MLP fitted with Adam on `train` (600 balanced blobs), judged with `validation`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs, labels = blobs(600) if train is None else train
    batches = [(inputs[i : i + 32], labels[i : i + 32]) for i in range(0, len(labels), 32)]
    return trained(model, optimizer, batches, epochs=2, validation=validation)


def test_references_on_repeated_validation_rows_are_judged_on_the_distinct_ones():
    inputs, labels = blobs(8, seed=1)
    repeated = [(inputs.repeat(8, 1), labels.repeat(8))]  # 64 rows, 8 examples
    report = mlp_run(repeated)
    assert report.measurements["reference_val_examples"] == 64
    assert report.measurements["reference_val_distinct"] == 8
    assert "8 of them distinct" in report.note and "shuffled_labels" in report.note
    assert all(math.isnan(report.features[name]) for name in RESTS_ON_REFERENCES)
    assert report.verdict == "healthy"


def test_a_class_with_too_few_validation_examples_leaves_the_class_mix_unjudged():
    # Training lost most of class 2 (10 of 200), and validation holds 6 of it: three times its training share, but
    # six examples say little of a share.
    train = blobs(0, counts=[200, 200, 10], seed=2)
    report = mlp_run([blobs(0, counts=[30, 30, 6], seed=3)], train=train)
    assert report.measurements["prior_shift"] > 2 and report.measurements["prior_shift_class_examples"] == 6
    assert f"class_imbalance (the class it reads has 6 validation examples, fewer than {PER_CLASS_FLOOR}" in report.note
    assert math.isnan(report.features["prior_shift"]) and report.verdict != "class_imbalance"
    # The same loss of training examples, held against a validation set with enough of the class: judged.
    judged = mlp_run([blobs(0, counts=[60, 60, 60], seed=3)], train=train)
    assert judged.measurements["prior_shift_class_examples"] == 60 and judged.features["prior_shift"] > 2
    assert "class_imbalance (" not in (judged.note or "")


def test_the_counts_the_floors_read_are_the_distinct_rows_and_the_shifted_class():
    inputs, labels = blobs(0, counts=[100, 100, 20])
    val_inputs, val_labels = blobs(0, counts=[20, 20, 12], seed=4)
    val_inputs[1] = val_inputs[0]  # one copy: 51 distinct of 52
    fitted = reference_fit(inputs, labels, val_inputs, val_labels)
    assert fitted["reference_val_examples"] == 52 and fitted["reference_val_distinct"] == 51
    # Class 2 has 20/220 of training and 12/52 of validation: the largest shift, read on its 12 examples.
    assert fitted["prior_shift"] == pytest.approx(12 / 52 / (20 / 220))
    assert fitted["prior_shift_class_examples"] == 12


@pytest.mark.parametrize("count", [PER_CLASS_FLOOR - 1, PER_CLASS_FLOOR])
def test_the_per_class_floor_reads_the_shifted_class_count(count):
    measured = {"prior_shift": 3.0, "prior_shift_class_examples": count, "reference_val_examples": 200}
    assert math.isnan(features(measured)["prior_shift"]) == (count < PER_CLASS_FLOOR)
    # A record from before the count was kept is judged as it was.
    assert features({"prior_shift": 3.0, "reference_val_examples": 200})["prior_shift"] == 3.0
