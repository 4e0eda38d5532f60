"""The TrainCheck silent errors: each is ported or says why, the listing matches the folders, the line is scored.

`python -m benchmarks.realbugs --set traincheck` is the benchmark (5 seeds, the recipes' own lengths); the slow
tests here run every ported recipe under the doctor on a short budget (two epochs).
"""

import ast
import csv
import re

import pytest

from benchmarks import runner
from benchmarks.realbugs import __main__ as realbugs
from benchmarks.realbugs.__main__ import (
    HERE,
    TRAINCHECK,
    not_ported,
    run_one,
    subjects,
    summarize_traincheck,
    tasks_for,
    traincheck_figures,
    traincheck_markdown,
    traincheck_subjects,
)
from benchmarks.runner import FIT_STEPS_CAP_VARIABLE
from benchmarks.working.common import EPOCH_CAP_VARIABLE

# Every silent error of TrainCheck's evaluation (silent-issue-detection/README.md), each with a reproduction.
UPSTREAM = {
    "baichuan2-86", "deepspeed-1801", "deepspeed-5794", "lightning-thunder-725", "mmpretrain-702", "pytorch-51800",
    "pytorch-84803", "pytorch-96600", "pytorch-104336", "pytorch-115607", "pytorch-forum-84911",
    "stackoverflow-60335387", "stackoverflow-67180955", "transformers-17877", "transformers-23723",
    "transformers-33844", "transformers-34204", "x-jxmnop-ddp-out-of-sync",
}  # fmt: skip
SUBJECTS = [row["subject"] for row in traincheck_subjects()]
PORTED = [s for s in SUBJECTS if not_ported(s, TRAINCHECK) is None]
SOURCE = re.compile(r"^OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/\S+ @ [0-9a-f]{40}$")


def test_the_listing_is_every_upstream_error_and_matches_the_folders():
    with (TRAINCHECK / "subjects.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"subject", "source", "bug", "expected"} <= set(rows[0])
    assert len(rows) == len({r["subject"] for r in rows})
    assert set(SUBJECTS) == UPSTREAM and len(SUBJECTS) == len(UPSTREAM)
    folders = {p.name for p in TRAINCHECK.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders == set(SUBJECTS)
    for row in rows:
        assert SOURCE.match(row["source"]), row["subject"]
        assert row["bug"] and row["expected"], row["subject"]


def _source(path) -> str | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SOURCE" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


@pytest.mark.parametrize("subject", SUBJECTS)
def test_every_subject_is_ported_with_a_source_or_says_why(subject):
    folder = TRAINCHECK / subject
    if not_ported(subject, TRAINCHECK) is not None:
        assert not (folder / "buggy.py").exists() and not (folder / "fixed.py").exists()
        assert len(not_ported(subject, TRAINCHECK)) > 40  # a reason, not a placeholder
        assert f"benchmarks/realbugs/traincheck/{subject}/NOT_PORTED.md" in not_ported(subject, TRAINCHECK)
        return
    for variant in ("buggy", "fixed"):
        text = (folder / f"{variant}.py").read_text()
        assert text.startswith(f'"""TrainCheck {subject}, {variant}: '), f"{subject}/{variant}.py"
        assert "def train(Doctor)" in text, f"{subject}/{variant}.py"
        assert SOURCE.match(_source(folder / f"{variant}.py") or ""), f"{subject}/{variant}.py"


def test_some_subjects_are_ported():
    assert len(PORTED) >= 5


def _result(subject, variant, seed, verdict, findings=None):
    findings = [] if verdict == "healthy" else (findings or [verdict])
    return {"subject": subject, "variant": variant, "seed": seed, "verdict": verdict, "findings": findings,
            "error": None, "warnings": [], "seconds": 1.0}  # fmt: skip


def test_detection_needs_the_buggy_program_flagged_and_the_fixed_one_healthy_by_majority():
    rows = [r for r in traincheck_subjects() if r["subject"] in ("stackoverflow-60335387", "pytorch-51800")]
    rows += [r for r in traincheck_subjects() if r["subject"] == "deepspeed-1801"]  # not ported: missed
    results = (
        [_result("stackoverflow-60335387", "buggy", s, "no_zero_grad" if s < 3 else "healthy") for s in range(5)]
        + [_result("stackoverflow-60335387", "fixed", s, "healthy") for s in range(5)]
        # flagged on every seed, but the fixed program is called sick on 3 of 5
        + [_result("pytorch-51800", "buggy", s, "wrong_mode") for s in range(5)]
        + [_result("pytorch-51800", "fixed", s, "lr_too_high" if s < 3 else "healthy") for s in range(5)]
    )
    summary = {s["subject"]: s for s in summarize_traincheck(rows, results)}
    assert summary["stackoverflow-60335387"]["detected"]
    assert summary["pytorch-51800"]["flagged"] and not summary["pytorch-51800"]["detected"]
    assert summary["deepspeed-1801"]["not_ported"] and not summary["deepspeed-1801"]["detected"]
    assert traincheck_figures(list(summary.values())) == {
        "detection": (1, 3),
        "buggy-flagged": (2, 3),
        "fixed-healthy": (1, 3),
    }
    table = traincheck_markdown(list(summary.values()), 5)
    assert "| deepspeed-1801 |" in table and "not ported:" in table
    assert "TrainCheck detection 1/3, buggy-flagged 2/3, fixed-healthy 1/3." in table


def _fake_run_cached(tasks, jobs, force):
    """Every buggy program flagged and every fixed one healthy, without running anything."""
    results = []
    for _, seed, labels, _ in tasks:
        verdict = "healthy" if labels["variant"] == "fixed" else "lr_too_low"
        results.append(_result(labels["subject"], labels["variant"], seed, verdict))
    return results


def _lines(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("realbugs ")]


def test_the_command_prints_the_traincheck_line_after_the_deepfd_lines(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(runner, "run_cached", _fake_run_cached)
    n_deepfd = len(subjects())
    ported_deepfd = sum(not_ported(r["subject"]) is None for r in subjects())
    assert realbugs.main(["--seeds", "3", "--out", str(tmp_path)]) == 0
    printed = _lines(capsys)
    assert [line.rsplit(" ", 1)[0] for line in printed] == [
        "realbugs detection",
        "realbugs buggy-flagged",
        "realbugs diagnosis",
        "realbugs fixed-healthy",
        "realbugs traincheck detection",
        "realbugs traincheck buggy-flagged",
        "realbugs traincheck fixed-healthy",
    ]
    lines = (tmp_path / "realbugs.lines").read_text().splitlines()
    assert lines[0] == f"realbugs detection {ported_deepfd}/{n_deepfd}"
    assert lines[1] == f"realbugs buggy-flagged {ported_deepfd}/{n_deepfd}"
    assert lines[3] == f"realbugs fixed-healthy {ported_deepfd}/{n_deepfd}"
    assert lines[4] == f"realbugs traincheck detection {len(PORTED)}/{len(SUBJECTS)}" and len(lines) == 7
    text = (tmp_path / "realbugs.md").read_text()
    assert "| the doctor (this repository) |" in text and "### TrainCheck's silent errors" in text


def test_the_traincheck_set_alone_prints_only_its_lines(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(runner, "run_cached", _fake_run_cached)
    assert realbugs.main(["--set", "traincheck", "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert [line.rsplit(" ", 1)[0] for line in _lines(capsys)] == [
        "realbugs traincheck detection",
        "realbugs traincheck buggy-flagged",
        "realbugs traincheck fixed-healthy",
    ]
    assert realbugs.main(["--set", "deepfd", "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert [line.split()[1] for line in _lines(capsys)] == ["detection", "buggy-flagged", "diagnosis", "fixed-healthy"]


def test_the_deepfd_cache_keys_are_unchanged_and_traincheck_keys_are_apart(tmp_path):
    deepfd = tasks_for(["31556268"], 1, tmp_path)
    assert deepfd[0][3].name.startswith("31556268-buggy-s0-") and deepfd[0][0] == HERE / "31556268" / "buggy.py"
    ours = tasks_for(["stackoverflow-60335387"], 1, tmp_path, TRAINCHECK)
    assert ours[0][3].name.startswith("traincheck-stackoverflow-60335387-buggy-s0-")
    assert ours[1][0] == TRAINCHECK / "stackoverflow-60335387" / "fixed.py"


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "variant"), [(s, v) for s in PORTED for v in ("buggy", "fixed")])
def test_every_recipe_runs_under_the_doctor_on_a_short_budget(monkeypatch, subject, variant):
    monkeypatch.setenv(EPOCH_CAP_VARIABLE, "2")
    monkeypatch.setenv(FIT_STEPS_CAP_VARIABLE, "10")  # the doctor's own fits of fresh models, as short
    result = run_one(subject, variant, seed=0, root=TRAINCHECK)
    assert result["error"] is None, result["error"]  # the doctor judged it: no refusal, no crash
    assert result["findings"][:1] == ([] if result["verdict"] == "healthy" else [result["verdict"]])
