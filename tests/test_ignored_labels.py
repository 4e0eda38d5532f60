"""Class labels the loss ignores (-1, -100, 255 as padding) and inputs the model casts itself: judged, not crashed on.

A class label outside the output's classes that the loss ignores (its ignore_index) is left out of every count and
score the doctor makes: the class mix, the accuracies, the confident disagreement, the reference fit's examples.
One the loss does not ignore is refused at the first batch (tests/test_doctor_bad_input.py). Integer inputs cast
inside forward (uint8 pixels) are measured at the model's first layer; token ids into an embedding have no scale.
"""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from doctor import Doctor
from doctor.probe_loop import probe
from harness.targets import Scorer, identify_loss, in_classes

pytestmark = pytest.mark.usefixtures("one_thread")


def _cross_entropy(out, y):
    return F.cross_entropy(out, y)  # a plain function: ignores -100, PyTorch's default ignore_index


# case: (the label the loss ignores, the loss, whether the first batch holds it)
IGNORED = {
    "-1, nn.CrossEntropyLoss(ignore_index=-1)": (-1, nn.CrossEntropyLoss(ignore_index=-1), True),
    "255, nn.CrossEntropyLoss(ignore_index=255)": (255, nn.CrossEntropyLoss(ignore_index=255), True),
    "-100, a plain function (the default ignore_index)": (-100, _cross_entropy, True),
    "-1 only after the first batch": (-1, nn.CrossEntropyLoss(ignore_index=-1), False),
}


def _data(ignored: int, in_first: bool):
    torch.manual_seed(0)
    x = torch.randn(320, 8)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()  # three classes, unbalanced
    y[(0 if in_first else 64) :: 7] = ignored
    return x, y


@pytest.mark.parametrize("case", IGNORED)
def test_labels_the_loss_ignores_are_left_out_of_every_count_and_score(case):
    ignored, loss_fn, in_first = IGNORED[case]
    x, y = _data(ignored, in_first)
    train = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)]
    val_x, val_y = x[256:], y[256:]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    # Every step watched (no cost budget): the counts and shares are compared exactly with the labels' own.
    doctor = Doctor(net, optimizer, loss_fn, validation=[(val_x, val_y)], census_every=4, budget=None)
    for _ in range(3):  # three epochs: every label is seen three times, so the shares are the labels' own
        for xb, yb in doctor.watch(train):
            loss = loss_fn(net(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    m = doctor.report().measurements
    seen = y[:256][y[:256] != ignored]
    counts = torch.bincount(seen, minlength=3).double()
    assert m["majority_share"] == pytest.approx(float(counts.max() / counts.sum()))
    assert m["label_imbalance"] == pytest.approx(float(counts.max() / counts.min()))
    assert m["reference_examples"] == len(seen)  # the reference fit learns no class -1
    with torch.no_grad():
        kept = val_y != ignored
        right = net(val_x).argmax(dim=1)[kept] == val_y[kept]
    assert m["final_val_acc"] == pytest.approx(float(right.double().mean()))  # not counted wrong on ignored rows
    assert m["reference_val_examples"] == int(kept.sum())
    assert math.isfinite(m["confident_disagreement"]) and math.isfinite(m["batch_label_mix"])
    assert m["loss_kind"] == "cross_entropy"  # named on the well-labelled rows


def test_the_scorer_and_the_loss_naming_leave_out_what_the_loss_ignores():
    torch.manual_seed(0)
    out, y = torch.randn(8, 3), torch.tensor([0, 1, 2, -1, 0, 255, 1, -100])
    assert in_classes(y, 3).tolist() == [True, True, True, False, True, False, True, False]
    scorer = Scorer("multiclass")
    scorer.add(out, y)
    keep = in_classes(y, 3)
    assert scorer.count == 5
    assert scorer.value() == pytest.approx(float((out.argmax(dim=1)[keep] == y[keep]).double().mean()))
    # Before: IndexError from the candidate nll_loss on -1, raised through the doctor's frames.
    assert identify_loss(nn.CrossEntropyLoss(ignore_index=-1), out[:5], y[:5]) == "cross_entropy"
    assert identify_loss(nn.CrossEntropyLoss(ignore_index=-1), out[3:4], y[3:4]) == "other"  # no row to name it on


# ----- the input scale of integer inputs: read where the model's first layer sees it -----------------------------
class Cast(nn.Module):
    """uint8 pixels cast inside forward, divided by `scale`."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x.float() / self.scale)


class Lookup(nn.Module):
    """A table of its own, indexed by integer inputs: not an nn.Embedding, and not a scale the doctor can read."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(256, 2) * 0.1)

    def forward(self, x):
        return self.weight[x.long()].sum(dim=1)


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.embed(x.long()).mean(dim=1))


class Wrapped(nn.Module):
    """The same table as a layer of the model: the first layer the doctor finds, and it takes integers."""

    def __init__(self):
        super().__init__()
        self.table = Lookup()

    def forward(self, x):
        return self.table(x)


def _pixels():
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (128, 8), generator=generator, dtype=torch.uint8)
    y = (x[:, 0] > 127).long()
    return [(x[i : i + 32], y[i : i + 32]) for i in range(0, 128, 32)]


def _rms(values: torch.Tensor) -> float:
    return float(values.float().pow(2).mean().sqrt())


NOT_MEASURED = "unscaled_inputs not judged: the input scale was not measured ({})"
# case: (model factory, the expected input_rms from the first batch's inputs (None: NaN), the report's note)
INTEGER_INPUTS = {
    "uint8 pixels scaled in forward": (lambda: Cast(255.0), lambda x: _rms(x.float() / 255), None),
    "uint8 pixels not scaled in forward": (lambda: Cast(1.0), lambda x: _rms(x.float()), None),
    "token ids into an embedding": (Tokens, None, None),  # token ids have no scale: nothing to judge or say
    "integer ids into a layer of the model's own": (
        Wrapped,
        None,
        NOT_MEASURED.format("the model's first layer, table (Lookup), takes no floating-point values"),
    ),
    "integer ids into the model's own parameters": (
        Lookup,
        None,
        NOT_MEASURED.format(
            "no layer with parameters of its own was called: the model's forward computes with its own"
        ),
    ),
}


@pytest.mark.parametrize("case", INTEGER_INPUTS)
def test_integer_inputs_are_measured_where_the_first_layer_sees_them(case):
    factory, expected, note = INTEGER_INPUTS[case]
    batches = _pixels()
    report = probe(factory, batches, nn.CrossEntropyLoss(), lambda p: torch.optim.Adam(p, lr=1e-3), steps=8)
    measured = report.measurements["input_rms"]
    if expected is not None:  # before: NaN, and the input-scale rule silently not judged
        assert measured == pytest.approx(expected(batches[0][0]), rel=1e-5)
    else:
        assert math.isnan(measured)
    assert report.note == note
    verdicts = [f.verdict for f in report.findings]
    assert ("unscaled_inputs" in verdicts) == (case == "uint8 pixels not scaled in forward"), str(report)
