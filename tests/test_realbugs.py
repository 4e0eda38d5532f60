"""The real-bug subjects: each is ported or says why, each recipe runs under the doctor, and the scoring's rules.

`make realbugs` is the benchmark (5 seeds, the recipes' own lengths); these tests run the recipes on a short
budget (two epochs), a few in the fast suite and all of them under `-m slow`.
"""

import csv

import pytest

from analysis.rules import RULES
from benchmarks.realbugs import kerasport
from benchmarks.realbugs.__main__ import (
    HERE,
    VERDICT_TYPES,
    figures,
    not_ported,
    run_one,
    subjects,
    summarize,
)
from benchmarks.runner import FIT_STEPS_CAP_VARIABLE

SUBJECTS = [row["subject"] for row in subjects()]
PORTED = [s for s in SUBJECTS if not_ported(s) is None]
DEEPFD_TYPES = {
    "opt", "lr", "act", "loss", "epoch", "batch_size", "init", "missing_prep", "wrong_prep", "layers", "layer_props",
    "training_data_quality", "model_type",
}  # fmt: skip
FAST = {"33969059", "45337371", "38648195"}  # regression, one-unit binary, multi-label


def test_the_subjects_file_is_the_benchmarks_twenty_with_their_ground_truth():
    with (HERE / "subjects.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 20
    for row in rows:
        assert set(row["deepfd_labels"].split()) <= DEEPFD_TYPES, row["subject"]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_every_subject_is_ported_or_says_why(subject):
    folder = HERE / subject
    if not_ported(subject) is not None:
        assert len(not_ported(subject)) > 40  # a reason, not a placeholder
        return
    for variant in ("buggy", "fixed"):
        text = (folder / f"{variant}.py").read_text()
        assert text.startswith('"""') and "def train(Doctor)" in text, f"{subject}/{variant}.py"


def test_the_verdict_mapping_covers_every_verdict_with_deepfd_types():
    assert {rule.verdict for rule in RULES} | {"healthy", "nonfinite_loss"} <= set(VERDICT_TYPES)
    for verdict, types in VERDICT_TYPES.items():
        assert set(types) <= DEEPFD_TYPES, verdict


def _recipes(subjects: list[str]):
    return [pytest.param(s, v, id=f"{s}-{v}") for s in subjects for v in ("buggy", "fixed")]


def _short_run(monkeypatch, subject, variant):
    monkeypatch.setattr(kerasport, "EPOCH_CAP", 2)
    monkeypatch.setenv(FIT_STEPS_CAP_VARIABLE, "10")  # the doctor's own fits of fresh models, as short
    result = run_one(subject, variant, seed=0)
    assert result["error"] is None, result["error"]  # the doctor judged it: no refusal, no crash
    # The failing findings, the verdict first; a healthy verdict has none (its warnings are listed apart).
    assert result["findings"][:1] == ([] if result["verdict"] == "healthy" else [result["verdict"]])
    assert isinstance(result["warnings"], list)
    return result


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "variant"), _recipes(sorted(FAST)))
def test_a_few_recipes_run_under_the_doctor_on_a_short_budget(monkeypatch, subject, variant):
    _short_run(monkeypatch, subject, variant)


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "variant"), _recipes([s for s in PORTED if s not in FAST]))
def test_every_recipe_runs_under_the_doctor_on_a_short_budget(monkeypatch, subject, variant):
    _short_run(monkeypatch, subject, variant)


def _result(subject, variant, seed, verdict, findings=None):
    findings = findings or [verdict]
    return {"subject": subject, "variant": variant, "seed": seed, "verdict": verdict, "findings": findings,
            "error": None}  # fmt: skip


def test_detection_needs_the_buggy_program_flagged_and_the_fixed_one_healthy_by_majority():
    rows = [r for r in subjects() if r["subject"] in ("33969059", "45337371")]  # both: true type act
    results = (
        [_result("33969059", "buggy", s, "constant_output") for s in range(3)]
        + [_result("33969059", "buggy", s, "healthy") for s in range(3, 5)]
        + [_result("33969059", "fixed", s, "healthy") for s in range(5)]
        # flagged on every seed, with a type that is not act; the fixed program called sick on 3 of 5
        + [_result("45337371", "buggy", s, "lr_too_low") for s in range(5)]
        + [_result("45337371", "fixed", s, "lr_too_high" if s < 3 else "healthy") for s in range(5)]
    )
    summary = {s["subject"]: s for s in summarize(rows, results)}
    assert summary["33969059"]["detected"] and summary["33969059"]["diagnosed"]
    assert summary["45337371"]["flagged"] and not summary["45337371"]["fixed_healthy"]
    assert not summary["45337371"]["detected"] and not summary["45337371"]["diagnosed"]
    assert figures(list(summary.values())) == {
        "detection": (1, 2),
        "buggy-flagged": (2, 2),
        "diagnosis": (1, 2),
        "fixed-healthy": (1, 2),
    }


def test_a_later_finding_counts_for_the_diagnosis():
    rows = [r for r in subjects() if r["subject"] == "33969059"]
    results = [_result("33969059", "buggy", s, "unscaled_inputs", ["unscaled_inputs", "constant_output"]) for s in
               range(5)] + [_result("33969059", "fixed", s, "healthy") for s in range(5)]  # fmt: skip
    assert summarize(rows, results)[0]["diagnosed"]
