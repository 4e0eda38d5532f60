"""The proof that a check is added in one place: a throwaway check, end to end, with no file of the project edited.

The check lives in a temporary module named by DOCTOR_CHECKS (analysis/checks/__init__.py), and its fault in a
temporary fault file that Hydra's --config-dir adds (docs/grid.md). Then, as a user would: the grid records cells
of the fault, `analysis.fit` fits the check's threshold, the rules judge a record with it, and the rules page lists
it. The worked example in docs/architecture.md ("Adding a check") is the same check.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_entry

CHECK_MODULE = '''
"""A throwaway check: a loop that waits on its data for most of its time (a second starved_loader)."""

from analysis.checks.base import Check, Harm

STALLED_FEED = Check(
    verdict="stalled_feed",
    feature="data_wait_ratio",  # an existing feature: seconds waiting for batches per second of compute
    above=True,
    needs_harm=False,
    evidence="the loop waited {value:.2g}s for data per second of its own compute (threshold {threshold:.2g})",
    next_step="give the loader workers, or cache the decoded data",
    order=5,  # before starved_loader (10): the first failing check is the verdict
    parts=("batches",),
    harm=Harm("time", slower=1.5),
)

CHECKS = (STALLED_FEED,)
'''

FAULT_FILE = """# @package _global_
# A throwaway fault: the batch iterator stalls three times as long as each step computes.
fault:
  stalled_feed: stalled_feed
data:
  batch_latency: 3.0
"""

# Run with the check module importable and named: fit, judge and document, and say what came out.
PIPELINE = """
import json, sys
from pathlib import Path
from analysis.fit import write_thresholds
from analysis.load import load_records
from analysis.rules import RULES, diagnose, load_thresholds, rules_table
from doctor.recipe import PARTS

records = load_records(sys.argv[1])
thresholds_file = Path(sys.argv[2])
write_thresholds(records, thresholds_file)
budget = int(records.steps.max())
thresholds = load_thresholds(budget, thresholds_file)
verdicts = {fault: [diagnose(row, RULES, thresholds)[0].verdict for _, row in rows.iterrows()]
            for fault, rows in records.groupby("fault")}
print(json.dumps({
    "order": [rule.verdict for rule in RULES][:2],
    "recorded": records.diagnosis.value_counts().to_dict(),
    "threshold": thresholds.get("stalled_feed"),
    "verdicts": verdicts,
    "documented": any(line.startswith("| 1 | `stalled_feed` |") for line in rules_table(thresholds_file).splitlines()),
    "parts": PARTS.get("stalled_feed"),
}))
"""


def _status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_throwaway_check_is_collected_recorded_fitted_judged_and_documented_with_no_file_edited(tmp_path):
    before = _status()
    (tmp_path / "stalled_checks.py").write_text(CHECK_MODULE)
    (tmp_path / "conf" / "fault").mkdir(parents=True)
    (tmp_path / "conf" / "fault" / "stalled_feed.yaml").write_text(FAULT_FILE)
    records = tmp_path / "records"
    grid = ["+sweep=smoke", "fault=healthy,stalled_feed", "dataset=digits", "seed=0,1", "loop.steps=100"]
    swept = run_entry("--config-dir", str(tmp_path / "conf"), *grid, f"run.records={records}", timeout=600)
    assert swept.returncode == 0, swept.stderr[-2000:]

    env = {**os.environ, "DOCTOR_CHECKS": "stalled_checks", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    command = [sys.executable, "-c", PIPELINE, str(records), str(tmp_path / "thresholds.json")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    assert found["order"] == ["stalled_feed", "starved_loader"]  # collected, in its place among the checks
    assert found["recorded"] == {"healthy": 2, "stalled_feed": 2}  # the grid labels its cells with its verdict
    assert found["threshold"] is not None and found["threshold"] > 0  # fitted from those cells
    assert found["verdicts"] == {"healthy": ["healthy", "healthy"], "stalled_feed": ["stalled_feed"] * 2}  # judged
    assert found["documented"] and found["parts"] == ["batches"]  # on the rules page, and the doctor's "where:"
    assert _status() == before  # no file of the project was edited
