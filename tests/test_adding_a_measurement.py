"""The proof of docs/architecture.md's "Adding a measurement": a throwaway one, end to end, in a copy of the project.

A check on what the instruments do not measure yet needs the measurement first: a knob that plants the fault, a
collector and its column, a feature that reads the column, and the check. Here each edit the walk-through names
is made to a copy of harness/, analysis/, doctor/, conf/ and hydra_plugins/ (an edit whose anchor text has moved
fails here, so the walk-through cannot go stale), and the copy is then used as a user would: a sweep records the
new column, `write_thresholds` fits the check on those records (what `make fit` does), the rules judge the records,
and the doctor, on a loop of its own, measures the column and names the fault. The files touched are counted.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

# The collector: a new module of harness/instruments/, its column declared where it is produced.
COLLECTOR = '''"""A throwaway measurement: the mean absolute input value the loop trains on."""

import math

from harness.batches import tensors
from harness.column import F64, Column
from harness.instruments.loop import Collector


class InputMagnitude(Collector):
    """The mean |input| over every batch seen: far from 1 when the inputs were never standardized."""

    COLUMNS = (Column("input_mean_abs", F64, "mean absolute input value over the batches seen", per_budget=True),)

    def __init__(self, loop):
        self.total, self.count = 0.0, 0

    def see(self, inputs, targets) -> None:
        for tensor in tensors(inputs):
            self.total += float(tensor.detach().abs().sum())
            self.count += tensor.numel()

    def columns(self, final: bool) -> dict:
        return {"input_mean_abs": self.total / self.count if self.count else math.nan}
'''

# The check: a module of its own, named by DOCTOR_CHECKS (analysis/checks/__init__.py), as in "Adding a check".
CHECK_MODULE = '''
"""A throwaway check on the throwaway measurement: inputs offset far from zero."""

from analysis.checks.base import Check, Harm

OFFSET_INPUTS = Check(
    verdict="offset_inputs",
    feature="input_mean_abs",
    above=True,
    needs_harm=False,
    evidence="the inputs' mean |value| is {value:.3g} (threshold {threshold:.3g})",
    next_step="standardize the inputs with the training split's mean and deviation",
    order=13,  # a free place among the checks (the first failing one is the verdict)
    parts=("batches",),
    harm=Harm("definition"),  # inputs the recipe meant to standardize and did not: wrong whatever they score
)

CHECKS = (OFFSET_INPUTS,)
'''

FAULT_FILE = """# @package _global_
# A throwaway fault: every input feature offset by 50 after standardization.
fault:
  offset_inputs: offset_inputs
data:
  input_offset: 50.0
"""

# The edits to the project's own files: (file, the text it holds now, what replaces it). Each anchor must be there.
EDITS = [
    (
        "conf/config.yaml",
        "  shuffle_labels: false",
        "  input_offset: 0.0      # {>= 0} added to every input feature after the scale (fault knob)\n"
        "  shuffle_labels: false",
    ),
    (
        "harness/data.py",
        "    return features * data_cfg.input_scale\n",
        "    return features * data_cfg.input_scale + data_cfg.input_offset\n",
    ),
    (
        "harness/instruments/observer.py",
        "        self.modes = Modes(loop)\n",
        "        self.modes = Modes(loop)\n        self.input_magnitude = InputMagnitude(loop)\n",
    ),
    (
        "harness/instruments/observer.py",
        "            self.modes,\n",
        "            self.modes,\n            self.input_magnitude,\n",
    ),
    (
        "harness/instruments/observer.py",
        "from harness.instruments.modes import Modes\n",
        "from harness.instruments.input_magnitude import InputMagnitude\nfrom harness.instruments.modes import Modes\n",
    ),
    (
        "analysis/declarations/data.py",
        "DECLARED = (\n",
        "DECLARED = (\n"
        '    Feature("input_mean_abs", "mean absolute input value", "nothing: standardized inputs sit near 0.8",'
        ' True, lambda m: column(m, "input_mean_abs"), reads=("input_mean_abs",)),\n',
    ),
]
NEW_FILES = {"harness/instruments/input_magnitude.py": COLLECTOR}
# Outside the project: the check's module and the fault's file (a user's own, or conf/fault/ and analysis/checks/).
OUTSIDE = 2

PIPELINE = """
import json, sys
from pathlib import Path
import torch
from torch import nn
from analysis.fit import write_thresholds, THRESHOLDS_FILE
from analysis.load import load_records
from analysis.rules import RULES, diagnose, load_thresholds
from doctor import probe

records = load_records(sys.argv[1])
write_thresholds(records, THRESHOLDS_FILE)  # `make fit`, into the copy's analysis/thresholds.json
thresholds = load_thresholds(int(records.steps.max()))
verdicts = {fault: sorted(diagnose(row, RULES, thresholds)[0].verdict for _, row in rows.iterrows())
            for fault, rows in records.groupby("fault")}
measured = records.groupby("fault").input_mean_abs.min().to_dict()

def doctor_on(offset):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(640, 8, generator=generator)
    y = (x.sum(dim=1) > 0).long()  # every column counts: no one column gives the label away
    batches = [(x[i : i + 32] + offset, y[i : i + 32]) for i in range(0, 640, 32)]
    batches, held_out = batches[:16], batches[16:]  # validation of its own, no copy of a training example
    model = lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = lambda params: torch.optim.Adam(params, lr=1e-3)
    report = probe(model, batches, nn.functional.cross_entropy, optimizer, steps=120, validation=held_out)
    return report.measurements.get("input_mean_abs"), [f.verdict for f in report.failing]

print(json.dumps({"threshold": thresholds.get("offset_inputs"), "verdicts": verdicts, "measured": measured,
                  "doctor_offset": doctor_on(50.0), "doctor_plain": doctor_on(0.0)}))
"""


def copy_of_the_project(target):
    for folder in ("harness", "analysis", "doctor", "conf", "hydra_plugins"):
        shutil.copytree(ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__"))


def edit(copy) -> set[str]:
    """Make the walk-through's edits in the copy; returns the project files touched by hand."""
    for path, old, new in EDITS:
        file = copy / path
        source = file.read_text()
        assert source.count(old) == 1, f"{path} no longer holds {old!r}: bring the walk-through up to date"
        file.write_text(source.replace(old, new))
    for path, text in NEW_FILES.items():
        (copy / path).write_text(text)
    return {path for path, _, _ in EDITS} | set(NEW_FILES)


def test_the_walk_through_names_every_file_the_test_touches():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("### Adding a measurement") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    for path in {path for path, _, _ in EDITS} | set(NEW_FILES):
        assert path in section, f"docs/architecture.md's walk-through does not name {path}"
    touched = len({path for path, _, _ in EDITS} | set(NEW_FILES)) + OUTSIDE
    assert re.search(rf"\b{touched} files\b", section), f"the walk-through should say it touches {touched} files"


@pytest.mark.slow
def test_a_throwaway_measurement_is_recorded_fitted_judged_and_measured_by_the_doctor(tmp_path):
    copy = tmp_path / "project"
    copy_of_the_project(copy)
    touched = edit(copy)
    assert len(touched) + OUTSIDE == 7
    (tmp_path / "offset_checks.py").write_text(CHECK_MODULE)
    (tmp_path / "extra" / "fault").mkdir(parents=True)
    (tmp_path / "extra" / "fault" / "offset_inputs.yaml").write_text(FAULT_FILE)
    env = {**os.environ, "DOCTOR_CHECKS": "offset_checks", "PYTHONPATH": f"{copy}{os.pathsep}{tmp_path}"}
    records = tmp_path / "records"
    grid = ["+sweep=smoke", "fault=healthy,offset_inputs", "dataset=digits", "seed=0,1", "loop.steps=100"]
    swept = subprocess.run(
        [sys.executable, "-m", "harness", "--config-dir", str(tmp_path / "extra"), *grid, f"run.records={records}"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert swept.returncode == 0, swept.stderr[-2000:]
    done = subprocess.run(
        [sys.executable, "-c", PIPELINE, str(records)], cwd=copy, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["measured"]["offset_inputs"] > 10 * found["measured"]["healthy"]  # the column, in the records
    assert found["threshold"] is not None  # fitted on them
    assert found["verdicts"] == {"healthy": ["healthy", "healthy"], "offset_inputs": ["offset_inputs"] * 2}
    (offset_value, offset_failing), (plain_value, plain_failing) = found["doctor_offset"], found["doctor_plain"]
    assert offset_value > 40 and offset_failing[:1] == ["offset_inputs"]  # the doctor measures and names it
    assert plain_value < 2 and "offset_inputs" not in plain_failing
