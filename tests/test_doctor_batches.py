"""Batches of every shape (harness/batches.py): the doctor reads them, and judges each loop as it judges a pair's.

Each shape runs the same MLP on digits with a healthy twin and planted faults, and must get the verdict a pair
batch gets; a batch the doctor cannot read is refused in one line saying what to pass.
"""

import dataclasses
import itertools
import sys

import pytest
import torch
from conftest import ROOT
from torch import nn

sys.path.insert(0, str(ROOT / "examples"))
from digits_cnn import TRAIN, VAL

from doctor import Doctor, UnsupportedTask
from harness.batches import BatchError, BatchLayout
from harness.instruments import Instruments
from harness.instruments.budget import SHARE

STEPS = 200
IMAGES, LABELS = TRAIN.tensors[0].flatten(1), TRAIN.tensors[1]
VAL_IMAGES, VAL_LABELS = VAL.tensors[0].flatten(1), VAL.tensors[1]


class Mlp(nn.Module):
    """64 pixels, 32 hidden units, 10 classes (or one regression output)."""

    def __init__(self, outputs=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, outputs))

    def forward(self, x):
        return self.net(x)


class TwoHalves(Mlp):
    """The image's top and bottom halves as two inputs: forward(top, bottom)."""

    def forward(self, top, bottom):
        return self.net(torch.cat([top, bottom], dim=1))


class Keywords(Mlp):
    """Hugging Face style: inputs by name (a mask among them), an object holding the logits back."""

    def forward(self, pixel_values, attention_mask=None, labels=None):
        logits = self.net(pixel_values * attention_mask)
        return {"loss": None, "logits": logits}  # a ModelOutput is a dict with attributes too


@dataclasses.dataclass
class Batch:
    """A batch object with attributes, as some libraries hand out (torch_geometric's Data, a dataclass)."""

    x: torch.Tensor
    y: torch.Tensor


# shape: (model class, batch from (x, y), Doctor's arguments, how the loop calls the model, output the loss reads)
SHAPES = {
    "(x, y) pair": (Mlp, lambda x, y: (x, y), {}, lambda m, b: m(b[0])),
    "dict with a labels key, keyword inputs": (
        Keywords,
        lambda x, y: {"pixel_values": x, "attention_mask": torch.ones_like(x), "labels": y, "index": "not a tensor"},
        {},
        lambda m, b: m(pixel_values=b["pixel_values"], attention_mask=b["attention_mask"])["logits"],
    ),
    "(top, bottom, y): two inputs": (
        TwoHalves,
        lambda x, y: (x[:, :32], x[:, 32:], y),
        {},
        lambda m, b: m(b[0], b[1]),
    ),
    "an object with x and y": (Mlp, lambda x, y: Batch(x, y), {}, lambda m, b: m(b.x)),
    "a dict, told its keys": (
        Mlp,
        lambda x, y: {"a": x, "b": y},
        {"inputs": "a", "targets": "b"},
        lambda m, b: m(b["a"]),
    ),
    "(y, x, index), told by functions": (
        Mlp,
        lambda x, y: (y, x, torch.arange(len(y))),
        {"inputs": lambda b: b[1], "targets": lambda b: b[0]},
        lambda m, b: m(b[1]),
    ),
}


def split_for_loss(shape, batch):
    """The targets of a batch of this shape, as the user's loop knows them."""
    if isinstance(batch, Batch):
        return batch.y
    if isinstance(batch, dict):
        return batch.get("labels", batch.get("b"))
    return batch[0] if shape.startswith("(y,") else batch[-1]


def batches_of(make, order=None):
    order = torch.randperm(len(LABELS)) if order is None else order
    for start in range(0, len(LABELS) - 63, 64):
        index = order[start : start + 64]
        yield make(IMAGES[index], LABELS[index])


def run(shape: str, fault: str, steps: int = STEPS, pushed: bool = False, budget=SHARE):
    """The user's own loop on this shape of batch, with the doctor's three lines and the planted fault.

    `budget`: the doctor's cost budget (harness/instruments/budget.py); None watches every step.
    """
    model_class, make, told, call = SHAPES[shape]
    torch.manual_seed(0)
    model = model_class()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.5 if fault == "lr_too_high" else 1e-2)
    loss_fn = nn.CrossEntropyLoss()
    validation = [make(VAL_IMAGES, VAL_LABELS)]
    doctor = Doctor(model, optimizer, loss_fn, validation=validation, model_factory=model_class, budget=budget, **told)
    sorted_order = torch.argsort(LABELS, stable=True) if fault == "unshuffled_batches" else None
    step = 0
    while step < steps:
        for batch in doctor.watch(batches_of(make, sorted_order)) if not pushed else batches_of(make, sorted_order):
            if pushed:  # a framework's callback hands each batch over instead of the doctor iterating them
                doctor.see(batch, waited_s=0.0)
            loss = loss_fn(call(model, batch), split_for_loss(shape, batch))
            if fault != "no_zero_grad":
                optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
            step += 1
            if step == steps:
                break
    return doctor.report()


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fault", ["healthy", "no_zero_grad", "lr_too_high"])
def test_each_batch_shape_gets_the_verdict_of_a_pair(shape, fault):
    report = run(shape, fault)
    assert report.verdict == fault, str(report)
    assert report.measurements["task"] == "multiclass"
    if fault == "healthy":  # everything a pair batch gets measured was measured
        m = report.measurements
        assert m["final_val_acc"] > 0.9 and m["final_train_acc"] > 0.9, str(report)
        assert m["memorize_best_loss"] < 0.1 and m["grad_carried_share"] == 0.0
        assert 0.9 < m["batch_label_mix"] < 1.1 and m["label_imbalance"] < 1.2


@pytest.mark.slow
def test_batches_handed_over_one_by_one_are_measured_as_batches_iterated():
    # Every step watched in both: under a budget, which steps are watched rests on each run's own clock.
    watched = run("(x, y) pair", "no_zero_grad", budget=None)
    pushed = run("(x, y) pair", "no_zero_grad", pushed=True, budget=None)
    assert pushed.verdict == watched.verdict == "no_zero_grad"
    for key in ("train_loss_curve", "grad_norm", "update_ratio", "batch_label_mix", "final_val_loss", "input_rms"):
        assert pushed.measurements[key] == watched.measurements[key], key
    assert pushed.measurements["data_wait_s"] == 0.0 < watched.measurements["data_wait_s"]


@pytest.mark.parametrize("zero_grad", [True, False])
def test_the_grids_fresh_gradient_reads_dict_batches_through_the_layout(zero_grad):
    torch.manual_seed(0)
    model = Keywords()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    instruments = Instruments(model, optimizer, nn.CrossEntropyLoss(), census_every=5)
    dicts = batches_of(SHAPES["dict with a labels key, keyword inputs"][1])
    for batch in instruments.watch(itertools.islice(dicts, 20)):
        logits = model(pixel_values=batch["pixel_values"], attention_mask=batch["attention_mask"])["logits"]
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    ratio = instruments.finish()["accumulation_ratio"]
    assert ratio == pytest.approx(1.0, abs=1e-5) if zero_grad else ratio > 2


def test_class_sorted_dict_batches_are_named():
    assert run("dict with a labels key, keyword inputs", "unshuffled_batches").verdict == "unshuffled_batches"


def test_several_float_inputs_are_laid_side_by_side_for_the_reference_fit():
    report = run("(top, bottom, y): two inputs", "healthy", steps=50)
    assert report.measurements["reference_val_acc"] > 0.9  # the 64 pixels again, from two halves


def test_regression_targets_in_a_dict():
    weights = torch.randn(64, generator=torch.Generator().manual_seed(0)) / 8
    torch.manual_seed(0)
    model = Mlp(outputs=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()
    doctor = Doctor(model, optimizer, loss_fn, model_factory=lambda: Mlp(outputs=1))
    for _ in range(20):
        regression = ({"x": x, "target": (x @ weights).unsqueeze(1)} for x, _ in batches_of(lambda a, b: (a, b)))
        for batch in doctor.watch(regression):
            loss = loss_fn(model(batch["x"]), batch["target"])
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    report = doctor.report()
    assert report.measurements["task"] == "regression" and report.verdict == "healthy", str(report)
    assert report.measurements["final_train_acc"] > 0.9  # R²


# ----- the layout on its own: what it reads, and what it refuses -----------------------------------------------
X, Y = torch.randn(4, 64), torch.tensor([0, 1, 2, 3])


@pytest.mark.parametrize(
    ("model", "batch", "told", "inputs_are"),
    [
        (Mlp(), (X, Y), {}, "tensor"),
        (Mlp(), [X, Y], {}, "tensor"),
        (Mlp(), {"x": X, "y": Y}, {}, "dict"),  # forward(x): taken by name
        (Mlp(), {"image": X, "label": Y}, {}, "tensor"),  # the one other tensor
        (TwoHalves(), (X[:, :32], X[:, 32:], Y), {}, "tuple"),
        (Keywords(), {"pixel_values": X, "attention_mask": X, "labels": Y, "idx": Y}, {}, "dict"),
        (Mlp(), Batch(X, Y), {}, "tensor"),
        (TwoHalves(), {"t": X[:, :32], "b": X[:, 32:], "c": Y}, {"inputs": ("t", "b"), "targets": "c"}, "dict"),
        (TwoHalves(), (Y, X[:, :32], X[:, 32:]), {"targets": 0}, "tuple"),
        (Mlp(), (Y, X), {"inputs": 1, "targets": 0}, "tensor"),
    ],
)
def test_the_layout_finds_inputs_and_targets_and_calls_the_model_as_the_loop_does(model, batch, told, inputs_are):
    layout = BatchLayout(model, **told)
    inputs, targets = layout.split(batch)
    assert torch.equal(targets, Y)
    assert type(inputs).__name__.lower() == inputs_are
    out = layout.forward(model, inputs)
    assert out.shape == (4, 10)
    if isinstance(inputs, dict):  # keys the model does not take by name are left out
        assert "idx" not in inputs and "labels" not in inputs


def test_an_output_object_is_read_by_its_logits_or_as_told():
    layout = BatchLayout(Keywords())
    assert layout.output_of({"loss": None, "logits": Y}) is Y
    assert BatchLayout(Mlp(), output=1).output_of((None, Y)) is Y
    with pytest.raises(BatchError, match=r"the model returned a tuple of 2 .*Doctor\(\.\.\., output=\.\.\.\)"):
        layout.output_of((Y, Y))


REFUSED = {
    "a dict without a targets key": (
        Mlp(),
        {"x": X, "z": Y},
        "a training batch is a dict (keys 'x', 'z') with no targets key of 'labels', 'label', 'targets', 'target',"
        " 'y': say where its inputs and targets are, Doctor(..., inputs=..., targets=...)",
    ),
    "a dict with two targets keys": (Mlp(), {"x": X, "label": Y, "labels": Y}, "with 2 ('labels', 'label') targets"),
    "three items for a model of one input": (
        Mlp(),
        (X, Y, Y),
        "a training batch is a tuple of 3 (Tensor, Tensor, Tensor) and the model's forward takes 1 input (x): say",
    ),
    "a tensor alone": (Mlp(), X, "a training batch is a Tensor, with no targets beside the inputs: say"),
    "one tensor for a model of two inputs": (
        TwoHalves(),
        (X, Y),
        "the model's forward takes 2 inputs (top, bottom) and the inputs of a batch are one tensor: say",
    ),
    "an object without known attributes": (Mlp(), object(), "a training batch is a object: say where"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_batch_the_doctor_cannot_read_is_refused_in_one_line_naming_what_to_pass(case):
    model, batch, message = REFUSED[case]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss())
    with pytest.raises(UnsupportedTask) as refused:
        for _ in doctor.watch([batch]):
            pass
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert "Doctor(..., inputs=..., targets=...)" in str(refused.value)


def test_a_mixed_tuple_of_keys_is_refused_when_the_doctor_is_built():
    with pytest.raises(UnsupportedTask, match=r"a tuple of ints .* or of strs .*, not a mix"):
        Doctor(Mlp(), torch.optim.SGD(Mlp().parameters(), lr=0.1), nn.CrossEntropyLoss(), inputs=(0, "x"))


RECIPE = """
import torch
from torch import nn

STEPS = 60
INPUTS, TARGETS, OUTPUT = ("left", "right"), "classes", "scores"
torch.manual_seed(0)
X = torch.randn(512, 8)
Y = (X[:, 0] + X[:, 1] > 0).long()
loss = nn.CrossEntropyLoss()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, a, b):
        return {"scores": self.layer(torch.cat([a, b], dim=1))}


def model():
    return Net()


def batch(start, end):
    return {"left": X[start:end, :4], "right": X[start:end, 4:], "classes": Y[start:end]}


def batches():
    return [batch(i, i + 32) for i in range(0, 256, 32)]


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


def validation():
    return [batch(256, 512)]
"""


def test_a_recipe_says_where_its_batches_keep_inputs_and_targets(tmp_path, capsys):
    from doctor.__main__ import main

    recipe = tmp_path / "dict_recipe.py"
    recipe.write_text(RECIPE)
    status = main([str(recipe)])
    out = capsys.readouterr().out
    # Healthy (exit 0); a run this short may carry a warning that its loss was still falling.
    assert status == 0 and out.startswith("verdict: healthy") and "(from 60 training steps)" in out.splitlines()[0], out


class SequenceFirstGru(nn.Module):
    """Inputs (T, B, features), batch second as nn.GRU's default; one class per sequence from the last step."""

    def __init__(self):
        super().__init__()
        self.gru, self.out = nn.GRU(8, 16), nn.Linear(16, 10)

    def forward(self, x):
        return self.out(self.gru(x)[0][-1])


def test_sequence_first_inputs_with_a_model_factory_are_judged_without_the_example_fits():
    """Memorization and the capacity fit take example rows; (T, B, ...) inputs have none: not measured, no crash."""
    torch.manual_seed(0)
    net = SequenceFirstGru()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(net, opt, loss_fn, model_factory=SequenceFirstGru)
    batches = [(IMAGES[i : i + 32].reshape(32, 8, 8).transpose(0, 1), LABELS[i : i + 32]) for i in range(0, 640, 32)]
    for x, y in doctor.watch(batches * 3):
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        doctor.after_backward(loss)
        opt.step()
    report = doctor.report()
    assert report.verdict  # judged, not crashed
    memorizes = report.checklist.checks[1]
    assert memorizes.ok is None and "a batch's inputs had 8 rows for 32 targets" in memorizes.detail
    assert report.measurements["capacity_examples"] == 0
