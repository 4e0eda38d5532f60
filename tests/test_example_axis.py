"""The example axis is decided once per run, and the quick references are judged only on enough examples.

A sequence-first loop at batch size 1 (the char-RNN tutorial: a name as a (letters, 1, features) stack, one target)
has one example per batch, not one per letter; a one-letter name happens to have as many input rows as targets,
which must not make the doctor fit references on the one-letter names alone. And references scored on a handful
of held-out examples are noise: the checks resting on them are not judged, and the report says so.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from analysis.features import REFERENCE_FLOOR, RESTS_ON_REFERENCES, features
from doctor import Doctor


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


def trained(model, optimizer, batches, epochs=1):
    """A plain cross-entropy loop with the doctor's three lines; the doctor's report."""
    doctor = Doctor(model, optimizer, F.cross_entropy)
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
