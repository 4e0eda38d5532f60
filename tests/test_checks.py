"""The checks as objects (analysis/checks/): validated when built, collected from their family modules.

The tables the project used to keep by hand (the rules, the recipe parts, the real-bug fault types, the harm
test) are derived from them.
"""

import math

import pytest

from analysis import checks
from analysis.checks.base import BY_DEFINITION, Check, Harm
from analysis.checks.numerics import AMP_STEPS_SKIPPED, NONFINITE_LOSS
from analysis.rules import GRID_FACTS, RULES, VERDICTS, diagnose, verdicts

A_CHECK = {
    "verdict": "a_check",
    "feature": "no_grad_share",
    "above": True,
    "needs_harm": False,
    "evidence": "{value:.0%} (threshold {threshold:.0%})",
    "next_step": "fix it",
    "order": 5,
}


def test_a_check_with_an_unknown_feature_raises_at_import_naming_the_nearest():
    with pytest.raises(ValueError, match=r"unknown feature for check a_check: 'no_grad_shar'; nearest: no_grad_share"):
        Check(**{**A_CHECK, "feature": "no_grad_shar"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parts": ("modle",)}, r"unknown recipe part for check a_check: 'modle'; known: .*model"),
        ({"fault_types": ("learning_rate",)}, r"unknown fault type for check a_check: 'learning_rate'; known: .*lr"),
        ({"fact": 0.5}, r"unknown record column for check a_check: 'no_grad_share'"),
        ({"in_grid": True}, r"check a_check: in_grid is for a fact"),
    ],
)
def test_every_part_of_a_check_is_validated_when_it_is_built(change, message):
    with pytest.raises(ValueError, match=message):
        Check(**{**A_CHECK, **change})
    with pytest.raises(ValueError, match=r"unknown harm kind 'twin'; known: accuracy, definition, time"):
        Harm("twin")
    with pytest.raises(ValueError, match=r"a harm read on time, and only that, gives `slower`"):
        Harm("time")


def test_the_fitted_rules_are_the_fitted_checks_in_order_and_orders_are_distinct():
    assert [c for c in checks.CHECKS if c.fitted] == RULES
    assert [c.order for c in checks.CHECKS] == sorted({c.order for c in checks.CHECKS})
    # The numeric facts need the doctor's own watch, and params_left_out is judged by the doctor alone (the grid's
    # mild params_not_updated is that fact, judged there by the fitted rule); the others the grid judges too, in order.
    in_grid = [
        "padding_in_loss",
        "future_visible",
        "nll_on_probabilities",
        "clamped_logits",
        "loss_broadcast",
        "ignores_inputs",
        "label_leak",
        "validation_copies",
    ]
    doctor_only = {"nonfinite_loss", "amp_steps_skipped", "params_left_out"}
    assert {c.verdict for c in checks.CHECKS if not c.fitted} == {*doctor_only, *in_grid}
    assert set(VERDICTS) == {c.verdict for c in RULES}
    assert [c.verdict for c in GRID_FACTS] == in_grid


def test_the_tables_are_derived_from_the_checks():
    from analysis.harm import BY_DEFINITION as HARMFUL_BY_DEFINITION
    from analysis.harm import BY_DEFINITION_FROM_CLASSES, BY_TIME
    from benchmarks.realbugs.__main__ import VERDICT_TYPES
    from doctor.recipe import PARTS

    for check in checks.CHECKS:
        assert PARTS[check.verdict] == check.parts and VERDICT_TYPES[check.verdict] == check.fault_types
        assert (check.verdict in HARMFUL_BY_DEFINITION) == (check.harm == BY_DEFINITION)
        assert BY_TIME.get(check.verdict) == check.harm.slower
        assert BY_DEFINITION_FROM_CLASSES.get(check.verdict) == check.harm.from_classes
    assert PARTS["unexplained_failure"] == ("train", "loss", "optimizer") and VERDICT_TYPES["healthy"] == ()


def test_a_check_whose_threshold_is_a_fact_is_judged_on_the_record_column():
    said = AMP_STEPS_SKIPPED.judge_fact({"amp_skipped_share": 0.75, "amp_scale_min": 1e-30})
    assert said.verdict == "amp_steps_skipped" and math.isnan(said.margin)
    assert said.evidence.startswith("the GradScaler skipped 75% of optimizer steps") and "1e-30" in said.evidence
    assert AMP_STEPS_SKIPPED.judge_fact({"amp_skipped_share": 0.5, "amp_scale_min": 1.0}) is None  # most: over half
    assert AMP_STEPS_SKIPPED.judge_fact({"amp_skipped_share": math.nan}) is None  # no scaler: not measured
    with pytest.raises(ValueError, match="has a fitted threshold"):
        RULES[0].judge_fact({})
    assert NONFINITE_LOSS.fact == 0 and NONFINITE_LOSS.order < AMP_STEPS_SKIPPED.order < RULES[0].order


def test_the_grid_judges_padding_in_loss_on_its_record_column_ahead_of_the_fitted_rules():
    import pandas as pd
    from hand_records import THRESHOLDS, record

    scored = record(padded_batches=40, padding_scored_batch_share=1.0, padding_scored_position_share=0.2)
    half = record(padded_batches=40, padding_scored_batch_share=0.5, padding_scored_position_share=0.1)
    unpadded = record(padded_batches=0, padding_scored_batch_share=math.nan, padding_scored_position_share=math.nan)
    starved = record(data_wait_s=3.0, loop_s=4.0, padding_scored_batch_share=1.0, padded_batches=40)
    starved["padding_scored_position_share"] = 0.2
    found = diagnose(scored, RULES, THRESHOLDS)
    assert [f.verdict for f in found] == ["padding_in_loss"]
    assert "in 100% of the 40 training batches holding padding" in found[0].evidence and "20.0%" in found[0].evidence
    assert [f.verdict for f in diagnose(half, RULES, THRESHOLDS)] == ["healthy"]  # half: not most
    assert [f.verdict for f in diagnose(starved, RULES, THRESHOLDS)] == ["padding_in_loss", "starved_loader"]
    assert [f.verdict for f in diagnose(scored, RULES, THRESHOLDS, facts=[])] == ["healthy"]
    table = verdicts(pd.DataFrame([scored, half, unpadded, starved]), RULES, THRESHOLDS)
    assert table.verdict.tolist() == ["padding_in_loss", "healthy", "healthy", "padding_in_loss"]
    assert table.fired.tolist()[3] == ["padding_in_loss", "starved_loader"]
    # Records written before the column existed are not judged on it.
    older = pd.DataFrame([scored]).drop(columns=["padding_scored_batch_share"])
    assert verdicts(older, RULES, THRESHOLDS).verdict.tolist() == ["healthy"]


def test_the_grid_judges_future_visible_on_its_record_column_ahead_of_answer_leak():
    import pandas as pd
    from hand_records import THRESHOLDS, record

    leak = {"final_train_loss": 0.03, "final_val_loss": 0.05, "lm_compressor_val_loss": 1.7}  # answer_leak fires
    moved, copied = record(future_token_effect=0.3), record(future_token_effect=0.3, **leak)
    found = diagnose(moved, RULES, THRESHOLDS)
    assert [f.verdict for f in found] == ["future_visible"] and "moved the outputs before the cut by 30%" in (
        found[0].evidence
    )
    assert [f.verdict for f in diagnose(copied, RULES, THRESHOLDS)] == ["future_visible", "answer_leak"]
    rows = [moved, record(future_token_effect=0.0), record(future_token_effect=0.005), record(), copied]
    table = verdicts(pd.DataFrame(rows), RULES, THRESHOLDS)
    assert table.verdict.tolist() == ["future_visible", "healthy", "healthy", "healthy", "future_visible"]


def test_a_new_family_module_is_collected_and_a_clash_of_order_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "throwaway_checks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "extra.py").write_text(
        "from analysis.checks.base import Check\n"
        f"EXTRA = Check(**{dict(A_CHECK, verdict='extra_check', order=15)!r})\n"
        "CHECKS = (EXTRA,)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = checks.collect([str(package)], "throwaway_checks")
    assert [c.verdict for c in found] == ["extra_check"]
    (package / "clash.py").write_text(
        "from analysis.checks.base import Check\n"
        f"CHECKS = (Check(**{dict(A_CHECK, verdict='clashing_check', order=15)!r}),)\n"
    )
    with pytest.raises(ValueError, match=r"checks \w+ and \w+ share 15: each needs its own"):
        checks.collect([str(package)], "throwaway_checks")


def test_an_evidence_sentence_shows_only_named_values_and_a_misspelled_one_fails_when_built():
    with pytest.raises(ValueError, match=r"unknown value in the evidence of check a_check: 'frist_loss'; nearest: "):
        Check(**{**A_CHECK, "evidence": "the first loss was {frist_loss:.3g}"})
    shown = Check(**{**A_CHECK, "evidence": "{value:.0%} at {where}", "supplied": ("where",)})
    assert shown.shown() == ["value", "where"]


def test_the_evidence_values_are_made_once_and_only_when_a_sentence_asks():
    from analysis.checks.evidence import Evidence

    made = Evidence({"task": "regression", "final_val_acc": 0.456, "train_loss_curve": None}, {"loss_left": 0.25})
    assert made.sentence("R² {val_score}, {loss_left:.0%} left; {value:.1f} > {threshold}", 2.0, 1) == (
        "R² 0.46, 25% left; 2.0 > 1"
    )
    assert "forecast_line" not in made._made  # the curve fit never ran: no sentence asked for it
    with pytest.raises(KeyError):
        made["first_loss"]  # a measurement this run does not have


def test_a_check_without_a_fitted_threshold_is_said_not_judged_until_make_fit(tmp_path):
    import json

    from analysis.rules import THRESHOLDS_FILE, load_thresholds, rules_table

    document = json.loads(THRESHOLDS_FILE.read_text())
    for thresholds in document["budgets"].values():
        del thresholds["label_noise"]  # as if label_noise had been added since the last fit
    older = tmp_path / "thresholds.json"
    older.write_text(json.dumps(document))
    with pytest.warns(UserWarning, match=r"not judged until `make fit` fits their thresholds .*: label_noise$"):
        assert "label_noise" not in load_thresholds(600, older)
    with pytest.warns(UserWarning):
        row = next(line for line in rules_table(older).splitlines() if "`label_noise`" in line)
    assert row.endswith("| not fitted | not fitted | not fitted | not fitted | not fitted |")


def test_a_check_whose_advice_is_no_evidence_value_raises_at_import():
    with pytest.raises(
        ValueError, match=r"unknown advice of check a_check: .loader_next_stp.; nearest: loader_next_step"
    ):
        Check(**{**A_CHECK, "advice": "loader_next_stp"})
