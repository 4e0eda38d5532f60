"""The bigger-machine checklist (doctor/machine.py): a check that was not measured says so, in text and in JSON.

"Not measured" is neither a pass nor a fail: `[n/a]` in the report, `"ok": null` in `--json`, and the conclusion
rests on the checks that were measured and names the ones that were not.
"""

import math
from types import MappingProxyType

import pytest
from hand_records import record

from doctor.diagnosis import diagnose
from doctor.observed import Observed

# What a finished run measured: a healthy hand-made record (tests/hand_records.py), on the CPU.
HEALTHY = {**record().to_dict(), "task": "multiclass", "nonfinite_losses": 0, "train_loss_curve": [2.3, 1.0, 0.1]}
NO_FACTORY = {"memorize_losses": [], "memorize_best_loss": math.nan}
OUT_OF_MEMORY = {"on_accelerator": True, "out_of_memory": "CUDA out of memory", "memory": "peak 79.9 of 80.0 GiB"}


def checklist(changes: dict | None = None, **observed):
    """The checklist of the healthy record with `changes` to its measurements and `observed` to the run."""
    measured = MappingProxyType({**HEALTHY, **(changes or {})})
    run = Observed(measured, 600, val_start=(2.3, 0.1), memorized_on=16, **observed)
    return diagnose(run).checklist


@pytest.mark.parametrize(
    ("case", "changes", "observed", "line"),
    [
        ("no factory", NO_FACTORY, {}, "[n/a] it memorizes a few examples: not measured (no model factory given)"),
        ("a CPU run", {}, {}, "[n/a] the accelerator is busy: no accelerator: the run is on the CPU"),
        ("no loop time", {"loop_s": 0.05}, {}, "[n/a] the loader keeps up: not measured (no time of the loop's own)"),
        ("measured", {}, {}, "[yes] it memorizes a few examples: best loss 0.001 on 16 examples"),
        ("measured", {}, {}, "[yes] it learns: validation accuracy 10% -> 97%"),
    ],
)
def test_a_check_not_measured_prints_n_a_and_is_null_in_json(case, changes, observed, line):
    made = checklist(changes, **observed)
    lines = [f"{c.mark} {c.check}: {c.detail}" for c in made]
    assert any(text.startswith(line) for text in lines), lines
    check = next(c for c in made.to_dict()["checks"] if line.split("] ")[1].startswith(c["check"] + ":"))
    assert check["ok"] is (None if line.startswith("[n/a]") else True)


def test_the_report_prints_the_checklist_with_n_a():
    measured = MappingProxyType({**HEALTHY, **NO_FACTORY})
    text = str(diagnose(Observed(measured, 600, val_start=(2.3, 0.1))))
    assert "  [n/a] it memorizes a few examples: not measured (no model factory given)" in text.splitlines()
    assert "[yes] the accelerator is busy" not in text


@pytest.mark.parametrize(
    ("case", "changes", "observed", "conclusion", "helps"),
    [
        (
            "measured, healthy, CPU",
            {},
            {},
            "not needed: the run learns, is fed, and fits in memory; a bigger machine would only make it faster",
            False,
        ),
        (
            "no factory, healthy",
            NO_FACTORY,
            {},
            "not needed: the run learns, is fed, and fits in memory; a bigger machine would only make it faster"
            " (not measured: it memorizes a few examples)",
            False,
        ),
        (
            "out of memory on a GPU",
            {},
            OUT_OF_MEMORY,
            "it may help: the run learns and is fed, but ran out of memory; first try a smaller batch, mixed precision"
            " and activation checkpointing",
            True,
        ),
        (
            "out of memory, no factory",
            NO_FACTORY,
            OUT_OF_MEMORY,
            "it may help: the run learns and is fed, but ran out of memory; first try a smaller batch, mixed precision"
            " and activation checkpointing (not measured: it memorizes a few examples)",
            True,
        ),
        (
            "memorization failed",
            {"memorize_best_loss": 2.0, "memorize_losses": [2.3, 2.0, 2.1]},
            OUT_OF_MEMORY,
            "no: fix why it does not learn first; a bigger machine would reproduce the failure sooner, at a higher"
            " price",
            False,
        ),
    ],
)
def test_the_conclusion_rests_on_measured_checks_and_names_the_rest(case, changes, observed, conclusion, helps):
    made = checklist(changes, **observed)
    assert (made.conclusion, made.helps) == (conclusion, helps)
