"""A finished run kept as JSON comes back as the same `Observed`, and so as the same report (doctor/observed_io.py)."""

import dataclasses
import json
import math
from types import MappingProxyType

import pytest
import torch
from test_doctor import train_over_the_doctor
from torch import nn

from analysis.rules import load_thresholds
from doctor import Doctor, diagnose, observed_io
from doctor.observed import Observed
from harness.instruments.nonfinite import Origin


def same(a, b) -> bool:
    """Equal values of equal types, NaN equal to NaN (a run's measurements hold NaN where nothing was measured)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | MappingProxyType):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def through_json(observed: Observed) -> Observed:
    return observed_io.from_plain(json.loads(json.dumps(observed_io.to_plain(observed))))


def short_run(nonfinite_at: int | None = None) -> Observed:
    """A real run of 12 steps of a small MLP, with validation; inf inputs at step `nonfinite_at`, if given."""
    torch.manual_seed(0)
    x, y = torch.randn(384, 8), torch.randint(0, 3, (384,))
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 384, 32)]
    if nonfinite_at is not None:
        batches[nonfinite_at][0][0, 0] = math.inf
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer, loss_fn = torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn, batches, validation=batches[:2])
    train_over_the_doctor(doctor, model, optimizer, loss_fn)
    return doctor.finish()


HAND_MADE = Observed(
    MappingProxyType(
        {
            "final_val_acc": math.nan,
            "grad_norm_curve": [1.5, math.nan, math.inf, -math.inf, -0.0, 1e-310],
            "census_steps": [0, 1, 2],
            "param_names": ["0.weight", "0.bias"],
            "grad_missing": [False, True],
            "task": "multiclass",
            "nothing": None,
            "pair": (1, 2.5),
            "nested": [[1.0, math.nan], []],
        }
    ),
    steps=7,
    val_start=(2.30, 0.1),
    on_accelerator=True,
    memory="peak 1.20 of 80.0 GiB",
    out_of_memory="CUDA out of memory",
    nonfinite=Origin(loss_step=5, loss_value=math.nan, what="inputs", step=5, detail="1 of 256 input values"),
    unmemorized="every example it would fit holds NaN or inf",
    memorized_on=3,
)


RUNS = {"hand-made": lambda: HAND_MADE, "real run": short_run, "real run with an inf input": lambda: short_run(4)}


@pytest.mark.parametrize("case", list(RUNS))
def test_a_kept_run_comes_back_the_same_and_gives_the_same_report(case):
    original = RUNS[case]()
    kept = through_json(original)
    assert same(kept, original)
    assert isinstance(kept.measurements, MappingProxyType)  # read-only, as Doctor.finish() makes it
    if case != "hand-made":  # the report reads a real run's every column
        thresholds = load_thresholds(original.steps)
        assert str(diagnose(kept, thresholds)) == str(diagnose(original, thresholds))
        assert json.dumps(diagnose(kept, thresholds).to_dict()) == json.dumps(diagnose(original, thresholds).to_dict())
    if case == "real run with an inf input":
        assert kept.nonfinite is not None and kept.nonfinite.what == "inputs"
        assert "nonfinite_loss" in str(diagnose(kept, load_thresholds(kept.steps)))


def test_a_field_the_file_holds_but_observed_lacks_is_ignored_and_one_it_lacks_takes_its_default():
    plain = observed_io.to_plain(HAND_MADE)
    plain["cost_of_a_later_doctor"] = {"share": 0.02}  # written by a newer doctor
    del plain["memorized_on"], plain["nonfinite"]  # written before these fields existed
    kept = observed_io.from_plain(plain)
    assert kept.memorized_on == 0 and kept.nonfinite is None
    assert same(kept.measurements, HAND_MADE.measurements) and kept.val_start == HAND_MADE.val_start
    plain["nonfinite"] = {**observed_io.to_plain(HAND_MADE)["nonfinite"], "seen_by": "a later watch"}
    assert same(observed_io.from_plain(plain).nonfinite, HAND_MADE.nonfinite)  # inside a dataclass too


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda plain: plain.pop("steps"), ValueError, "a kept Observed lacks steps"),
        (lambda plain: plain.update(nonfinite=[1, 2]), ValueError, "a Origin is kept as a JSON object"),
    ],
)
def test_a_kept_run_that_cannot_be_read_back_is_refused_naming_why(change, error, message):
    plain = observed_io.to_plain(HAND_MADE)
    change(plain)
    with pytest.raises(error, match=message):
        observed_io.from_plain(plain)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.tensor([1.0]), r"Observed\.measurements\.value: a Tensor cannot be kept as JSON exactly"),
        ({1: 2.0}, r"Observed\.measurements\.value: a dict cannot be kept"),
        ({"__tuple__": [1]}, "this format's mark for a tuple"),
        ([1.0, {2.0}], r"Observed\.measurements\.value\[1\]: a set cannot be kept"),
    ],
)
def test_a_value_json_cannot_hold_exactly_is_refused_when_writing(value, message):
    observed = dataclasses.replace(HAND_MADE, measurements=MappingProxyType({"value": value}))
    with pytest.raises(TypeError, match=message):
        observed_io.to_plain(observed)
