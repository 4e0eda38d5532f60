"""The two kinds of finding: a check that needs harm is failing only when the outcome gate is open, else a warning.

Hand-made records judged with the committed thresholds and a gate at a known place (0.10 of skill), so each
test reads one decision: a structural oddity on a run that learned as well as the references (a warning, the
verdict healthy), the same oddity on a run that did not (failing), a loop error whatever the outcome (failing),
harm without a named cause (unexplained_failure), and a regression run judged in R², never in accuracy.
"""

import math

import numpy as np
import pandas as pd
import pytest
from hand_records import PLANTED, THRESHOLDS, record

from analysis.features import features
from analysis.outcome_gate import OUTCOME_GATE
from analysis.rules import HEALTHY, RULES, UNEXPLAINED, WARNING, diagnose, load_thresholds, verdicts

GATED = {**THRESHOLDS, OUTCOME_GATE.name: 0.10}


def gated(planted: pd.Series) -> dict[str, float]:
    """The thresholds of the record's own budget (still_improving's is a 100-step run), the gate at 0.10."""
    return {**load_thresholds(int(planted["steps"])), OUTCOME_GATE.name: 0.10}


LEARNED = {"final_val_acc": 0.97, "reference_val_acc": 0.97}  # as well as the quick references
FELL_SHORT = {"final_val_acc": 0.60, "final_train_acc": 0.62, "reference_val_acc": 0.97}
SHORT_ON_VALIDATION = {"final_val_acc": 0.60, "reference_val_acc": 0.97}  # the training accuracy left as planted
NEEDS_HARM = [rule.verdict for rule in RULES if rule.needs_harm]
ON_ITS_OWN = [rule.verdict for rule in RULES if not rule.needs_harm]


def test_every_rule_says_which_kind_of_check_it_is():
    assert {"dead_relu", "exploding_gradients", "unscaled_inputs", "saturated_activations"} <= set(NEEDS_HARM)
    assert {"no_zero_grad", "wrong_mode", "starved_loader", "double_softmax"} <= set(ON_ITS_OWN)


@pytest.mark.parametrize("verdict", NEEDS_HARM)
def test_an_oddity_the_run_overcame_is_a_warning_and_the_verdict_healthy(verdict):
    planted = {**PLANTED[verdict], **LEARNED}
    if verdict == "overfitting":  # its measurement is the outcome itself: no healthy twin
        pytest.skip("fires only on a run that fell short")
    findings = diagnose(record(**planted), RULES, gated(record(**planted)))
    assert findings[0].verdict == HEALTHY, [f.verdict for f in findings]
    warned = [f for f in findings if f.kind == WARNING]
    assert verdict in [f.verdict for f in warned]
    evidence = next(f for f in warned if f.verdict == verdict).evidence
    assert "the run overcame it (the run's accuracy skill 0.97 reached the quick references' 0.97" in evidence


@pytest.mark.parametrize("verdict", NEEDS_HARM)
def test_the_same_oddity_on_a_run_that_fell_short_is_the_verdict(verdict):
    planted = record(**{**SHORT_ON_VALIDATION, **PLANTED[verdict]})
    findings = diagnose(planted, RULES, gated(planted))
    assert findings[0].verdict == verdict
    assert findings[0].kind != WARNING


@pytest.mark.parametrize("verdict", ON_ITS_OWN)
def test_a_loop_recipe_or_data_error_is_failing_whatever_the_outcome(verdict):
    findings = diagnose(record(**PLANTED[verdict]), RULES, GATED)
    assert findings[0].verdict == verdict and findings[0].kind != WARNING


def test_harm_without_a_named_cause_is_unexplained_and_lists_what_was_ruled_out():
    findings = diagnose(record(**FELL_SHORT), RULES, {**GATED, "overfitting": 2.0})
    assert [f.verdict for f in findings] == [UNEXPLAINED]
    evidence = findings[0].evidence
    assert "no check names a cause" in evidence and "ruled out:" in evidence and "dead_relu" in evidence
    assert "accuracy skill 0.56 fell 43% short of the quick references' 0.97 (0 = the baseline" in evidence
    assert "overfit one batch" in findings[0].next_step


def test_harm_from_a_model_that_fits_its_examples_in_a_clean_loop_is_not_model_too_small():
    """The cause that is not known is said so, with the capacity fit that rules out the model's size."""
    findings = diagnose(record(**FELL_SHORT), RULES, {**GATED, "overfitting": 2.0})
    assert findings[0].verdict == UNEXPLAINED
    assert "the model fits 101% as much of its training examples as quick references do" in findings[0].evidence
    assert "a fresh copy's, trained in a clean loop on 1024 of them" in findings[0].evidence
    assert "it has the capacity" in findings[0].evidence


def test_without_a_capacity_fit_a_run_that_fell_short_is_never_called_model_too_small():
    """No model factory, no capacity evidence: "fails, cause unknown" is not a small model."""
    unmeasured = {"capacity_score": math.nan, "capacity_baseline": math.nan, "capacity_examples": 0}
    findings = diagnose(record(**FELL_SHORT, **unmeasured), RULES, {**GATED, "overfitting": 2.0})
    assert findings[0].verdict == UNEXPLAINED
    assert "whether the model can fit the data was not measured" in findings[0].evidence
    small = diagnose(record(**FELL_SHORT, capacity_score=0.55), RULES, {**GATED, "overfitting": 2.0})[0]
    assert small.verdict == "model_too_small"
    assert "the model fits only 58% as much of its training examples as quick references do" in small.evidence
    assert "(Adam at 1e-02, full batch) on 1024 of them reaches accuracy 0.55, the run itself 62%" in small.evidence


def test_a_model_that_fitted_its_examples_in_its_own_run_is_not_model_too_small():
    """The run's own training score is capacity shown: a short clean fit that falls short does not outweigh it."""
    fitted_in_its_run = {**FELL_SHORT, "final_train_acc": 0.99, "capacity_score": 0.55}
    findings = diagnose(record(**fitted_in_its_run), RULES, {**GATED, "overfitting": 2.0})
    assert findings[0].verdict != "model_too_small"
    assert "model_too_small" not in [f.verdict for f in findings]


def test_a_healthy_run_with_no_oddity_says_no_rule_fired():
    findings = diagnose(record(), RULES, GATED)
    assert [(f.verdict, f.evidence) for f in findings] == [(HEALTHY, "no rule fired")]


def test_warnings_are_counted_in_the_healthy_verdicts_evidence():
    findings = diagnose(record(input_rms=250.0, first_loss=35.0, dead_unit_share_init=0.9), RULES, GATED)
    assert [(f.verdict, f.kind) for f in findings] == [
        (HEALTHY, "failing"),
        ("unscaled_inputs", WARNING),
        ("dead_relu", WARNING),
    ]
    assert findings[0].evidence == "no failing finding (2 warnings)"


def test_verdicts_over_a_table_agree_with_diagnose():
    rows = [
        record(input_rms=250.0),  # a warning
        record(input_rms=250.0, **FELL_SHORT),  # failing
        record(**PLANTED["no_zero_grad"]),  # failing on its own
        record(**FELL_SHORT),  # harm, no cause
    ]
    table = verdicts(pd.DataFrame(rows), RULES, {**GATED, "overfitting": 2.0})
    assert table.verdict.tolist() == [HEALTHY, "unscaled_inputs", "no_zero_grad", UNEXPLAINED]
    assert table.warnings.tolist() == [["unscaled_inputs"], [], [], []]
    for row, verdict in zip(rows, table.verdict, strict=True):
        assert diagnose(row, RULES, {**GATED, "overfitting": 2.0})[0].verdict == verdict


def test_without_the_gates_threshold_every_rule_is_failing_and_nothing_is_unexplained():
    """The naive rules (and a thresholds file from before the gate) judge as the first version did."""
    findings = diagnose(record(input_rms=250.0), RULES, THRESHOLDS_WITHOUT_GATE)
    assert findings[0].verdict == "unscaled_inputs"
    assert diagnose(record(**FELL_SHORT), RULES, THRESHOLDS_WITHOUT_GATE)[0].verdict != UNEXPLAINED


THRESHOLDS_WITHOUT_GATE = {k: v for k, v in THRESHOLDS.items() if k != OUTCOME_GATE.name}


def test_regression_is_judged_in_r2_and_its_evidence_holds_no_accuracy():
    regression = {
        "task": "regression",
        "ln_classes": 600.0,  # the targets' variance: no ln C
        "final_val_acc": -3.64,  # R²: worse than predicting the mean
        "final_train_acc": -3.6,
        "baseline_val_acc": math.nan,
        "majority_share": math.nan,
        "reference_val_acc": math.nan,
        "final_train_loss": 2000.0,
        "first_loss": 2100.0,
    }
    findings = diagnose(record(**regression), RULES, {**GATED, "overfitting": 0.1})
    text = " ".join(f.evidence for f in findings)
    assert "shuffled_labels" not in [f.verdict for f in findings]  # no class prior: not judged
    assert "accuracy" not in text and "-364%" not in text and "nan" not in text.lower(), text
    assert findings[0].verdict == UNEXPLAINED and "R² skill is -3.64" in findings[0].evidence


def test_overfitting_on_regression_prints_r2_by_name():
    """Without a reference, a gap on a run whose loss fell and whose R² is above 0 is a warning, in R²."""
    findings = diagnose(
        record(task="regression", final_train_acc=0.95, final_val_acc=0.40, reference_val_acc=math.nan),
        RULES,
        {**GATED, "overfitting": 0.3},
    )
    assert [(f.verdict, f.kind) for f in findings] == [(HEALTHY, "failing"), ("overfitting", WARNING)]
    assert "training R² 0.95 against validation 0.40: a gap of 0.55" in findings[1].evidence
    assert "no quick reference for this task" in findings[1].evidence


def test_without_a_reference_the_capacity_fit_says_neither_too_small_nor_not():
    """Regression has no quick reference: a perfect fit is no yardstick (noisy targets keep R² under 1)."""
    no_reference = {
        "task": "regression",
        "reference_train_acc": math.nan,
        "reference_loo_acc": math.nan,
        "reference_val_acc": math.nan,
        "baseline_val_acc": math.nan,
        "majority_share": math.nan,
        "capacity_baseline": 0.0,
    }
    fitted = diagnose(record(**no_reference, final_train_acc=0.999, capacity_score=0.28), RULES, GATED)
    assert "model_too_small" not in [f.verdict for f in fitted]
    short = diagnose(
        record(**no_reference, final_train_acc=-0.5, final_val_acc=-0.6, capacity_score=0.28),
        RULES,
        {**GATED, "overfitting": 2.0},
    )
    assert short[0].verdict == UNEXPLAINED, short
    assert "reaches R² 0.28 on them; with no quick reference to hold that against" in short[0].evidence


@pytest.mark.parametrize(("val_loss", "harmed"), [(2.1, True), (2.0, True), (1.5, False), (math.inf, True)])
def test_a_language_model_is_harmed_where_it_predicts_no_better_than_the_bigram_counts(val_loss, harmed):
    # A next-token task: no class-per-example reference (reference_val_acc NaN), the text's bigram loss known.
    text = {"task": "sequence", "reference_val_acc": math.nan, "lm_bigram_val_loss": 2.0, "final_val_loss": val_loss}
    planted = record(**{**PLANTED["vanishing_gradients"], **text})
    findings = diagnose(planted, RULES, gated(planted))
    assert (findings[0].verdict == "vanishing_gradients") == harmed, [f.verdict for f in findings]
    if not harmed:
        assert findings[0].verdict == HEALTHY
        warned = next(f for f in findings if f.verdict == "vanishing_gradients")
        assert "0.75x the token counts' on the same text" in warned.evidence


@pytest.mark.parametrize(("val_loss", "harmed"), [(2.05, False), (2.11, True)])
def test_a_language_model_within_the_counts_sampling_error_of_them_is_not_harmed(val_loss, harmed):
    """A model built to read one token back (a bigram by design) ends level with the counts: no harm shown."""
    text = {"task": "sequence", "reference_val_acc": math.nan, "final_val_loss": val_loss}
    counts = {"lm_bigram_val_loss": 2.2, "lm_unigram_val_loss": 2.0, "lm_counts_val_se": 0.05}  # the unigram is better
    planted = record(**{**PLANTED["vanishing_gradients"], **text, **counts})
    findings = diagnose(planted, RULES, gated(planted))
    assert (findings[0].verdict == "vanishing_gradients") == harmed, [f.verdict for f in findings]
    if not harmed:  # the warning says where the gate opens: the counts' sampling error above them
        assert "the gate opens at 1.050x" in next(f for f in findings if f.verdict == "vanishing_gradients").evidence


def test_without_the_bigram_reference_a_sequence_run_falls_back_on_its_own_loss():
    text = {"task": "sequence", "reference_val_acc": math.nan, "first_loss": 5.5, "final_train_loss": 5.4}
    planted = record(**{**PLANTED["vanishing_gradients"], **text})  # the loss barely fell: at 98% of its first
    assert diagnose(planted, RULES, gated(planted))[0].verdict == "vanishing_gradients"
    planted = record(**{**PLANTED["vanishing_gradients"], **text, "final_train_loss": 2.0})
    assert diagnose(planted, RULES, gated(planted))[0].verdict == HEALTHY


# The case: a schedule that leaves the rate far too low. The run beats ridge and 5-NN, which know nothing of the
# model, and falls far short of what the same model reaches in a clean loop. The copy's tolerance: 0.12 of skill.
BEATS_THE_REFERENCES = {"final_val_acc": 0.665, "final_train_acc": 0.67, "reference_val_acc": 0.568}
COPY = {"capacity_val_score": 0.822, "capacity_val_examples": 450}
WITH_COPY = {**GATED, OUTCOME_GATE.copy_name: 0.12, "overfitting": 2.0}


def test_a_run_that_beats_the_references_but_not_a_clean_copy_of_its_model_opens_the_gate():
    findings = diagnose(record(**BEATS_THE_REFERENCES, **COPY), RULES, WITH_COPY)
    assert findings[0].verdict == UNEXPLAINED, [f.verdict for f in findings]
    said = "fell 0.17 short of a clean copy of this model's 0.80 (the same model fitted in a clean loop"
    assert said in findings[0].evidence
    assert "the gate opens past 0.12, as far as healthy runs fall short of their own copies" in findings[0].evidence


def test_without_a_clean_copy_or_its_tolerance_the_run_is_held_against_the_references_alone():
    assert diagnose(record(**BEATS_THE_REFERENCES), RULES, WITH_COPY)[0].verdict == HEALTHY
    no_tolerance = {k: v for k, v in WITH_COPY.items() if k != OUTCOME_GATE.copy_name}
    assert diagnose(record(**BEATS_THE_REFERENCES, **COPY), RULES, no_tolerance)[0].verdict == HEALTHY


def test_a_run_short_of_its_copy_by_less_than_healthy_runs_are_keeps_the_gate_shut():
    close = {**BEATS_THE_REFERENCES, "final_val_acc": 0.74}  # 0.10 of skill short: within the tolerance
    findings = diagnose(record(**close, **COPY), RULES, WITH_COPY)
    assert findings[0].verdict == HEALTHY, [f.verdict for f in findings]


def test_a_clean_copy_within_sampling_error_of_the_run_keeps_the_gate_shut():
    """A copy scored on few validation examples: a gap of some points is noise, and the gate stays shut."""
    findings = diagnose(
        record(**BEATS_THE_REFERENCES, capacity_val_score=0.822, capacity_val_examples=20), RULES, WITH_COPY
    )
    assert findings[0].verdict == HEALTHY, [f.verdict for f in findings]


def test_a_gate_shut_on_both_yardsticks_says_where_the_copy_would_open_it():
    planted = record(**{**PLANTED["dead_relu"], **LEARNED, "capacity_val_score": 0.96, "capacity_val_examples": 450})
    findings = diagnose(planted, RULES, {**gated(planted), OUTCOME_GATE.copy_name: 0.12})
    assert findings[0].verdict == HEALTHY
    warned = next(f for f in findings if f.verdict == "dead_relu").evidence
    assert "reached the quick references' 0.97" in warned
    assert "a clean copy of this model reaches 0.96 (the gate opens 0.12 below it)" in warned


def test_the_copys_tolerance_is_a_quantile_of_how_far_healthy_runs_fall_short_of_their_copies(monkeypatch):
    """Fitted on healthy runs alone (not fault cells, nor healthy runs cut while still improving); off by default."""
    import dataclasses

    import analysis.fit as fit

    healthy, faults, cut_short = range(200), range(200, 220), range(220, 230)
    index = pd.RangeIndex(230)
    cut = pd.DataFrame({"diagnosis": HEALTHY}, index=index)
    cut.loc[list(faults), "diagnosis"] = "lr_too_low"
    cut.loc[list(cut_short), "diagnosis"] = "still_improving"
    gaps = pd.Series(0.0, index=index)
    gaps[list(healthy)] = [i / 1000 for i in healthy]  # 0 to 0.199 of skill short of their copies
    gaps[list(faults) + list(cut_short)] = 0.9  # would move the quantile, were they read
    table = pd.DataFrame({"copy_gap": gaps})
    harm = pd.DataFrame({"harmful": True, "by_outcome": False, "healthy": False}, index=index)
    harm.loc[list(healthy) + list(cut_short), ["by_outcome", "healthy"]] = True
    assert fit.fit_copy_tolerance(cut, table, harm) is None  # the shipped gate: the copy opens nothing
    monkeypatch.setattr(fit, "OUTCOME_GATE", dataclasses.replace(OUTCOME_GATE, copy_quantile=0.99))
    assert fit.fit_copy_tolerance(cut, table, harm) == pytest.approx(gaps[list(healthy)].quantile(0.99))
    few = table.copy()
    few.loc[100:199, "copy_gap"] = math.nan  # 100 healthy runs with a copy: still enough; 99 are not
    assert fit.fit_copy_tolerance(cut, few, harm) is not None
    few.loc[99, "copy_gap"] = math.nan
    assert fit.fit_copy_tolerance(cut, few, harm) is None


# ----- a run that stopped while still learning, and one its user cut short -------------------------------------
def loss_curve(steps: int, span: float, seed: int = 0) -> list[float]:
    """A training loss falling from 2.3 towards 0.1 with time constant `span` steps, with minibatch noise."""
    rng = np.random.default_rng(seed)
    return [0.1 + 2.2 * math.exp(-t / span) + 0.05 * rng.standard_normal() for t in range(steps)]


@pytest.mark.parametrize("steps", [100, 10_000])
def test_still_learning_is_read_on_the_runs_own_noise_at_any_length(steps):
    still = features({"train_loss_curve": loss_curve(steps, span=steps)})  # stopped a time constant in
    flat = features({"train_loss_curve": loss_curve(steps, span=steps / 20)})  # flat for its last 90%
    assert OUTCOME_GATE.still_learning(still) and not OUTCOME_GATE.flattened(still)
    assert not OUTCOME_GATE.still_learning(flat) and OUTCOME_GATE.flattened(flat)


def test_harm_while_the_loss_still_falls_is_still_improving_not_unexplained():
    thresholds = {**GATED, "overfitting": 2.0}
    falling = record(**FELL_SHORT, train_loss_curve=loss_curve(600, span=600))
    flat = record(**FELL_SHORT, train_loss_curve=loss_curve(600, span=30))
    found = diagnose(falling, RULES, thresholds)
    assert [f.verdict for f in found] == ["still_improving"]
    assert (
        "the training loss was still falling when the run stopped: across its last quarter it fell" in found[0].evidence
    )
    assert "and the run fell short (the run's accuracy skill 0.56 fell 43% short" in found[0].evidence
    assert found[0].next_step.startswith("train longer")
    assert diagnose(flat, RULES, thresholds)[0].verdict == UNEXPLAINED  # stopped learning, and fell short
    table = verdicts(pd.DataFrame([falling, flat]), RULES, thresholds)
    assert table.verdict.tolist() == ["still_improving", UNEXPLAINED]


def test_a_run_cut_before_its_loss_flattened_is_too_early_to_judge_and_its_oddities_are_warnings():
    thresholds = {**GATED, "overfitting": 2.0}
    cut = record(**FELL_SHORT, input_rms=250.0, first_loss=35.0, train_loss_curve=loss_curve(60, span=600))
    found = diagnose(cut, RULES, thresholds, cut_short=True)
    assert [(f.verdict, f.kind) for f in found] == [(HEALTHY, "failing"), ("unscaled_inputs", WARNING)]
    assert (
        "too early to judge the outcome: the run was cut while its training loss had not flattened" in found[0].evidence
    )
    assert "a warning, not the verdict: whether the run pays for it is (too early to judge" in found[1].evidence
    # Not cut: the same run stopped at its own end, and it is judged.
    assert diagnose(cut, RULES, thresholds)[0].verdict == "unscaled_inputs"
    # Cut after its loss flattened: judged as it stands.
    flat = record(**FELL_SHORT, train_loss_curve=loss_curve(600, span=30))
    assert diagnose(flat, RULES, thresholds, cut_short=True)[0].verdict == UNEXPLAINED
    # Cut before eight steps: nothing says it flattened.
    assert (
        "cut before 8 training steps"
        in diagnose(record(**FELL_SHORT, train_loss_curve=[2.3] * 5), RULES, thresholds, cut_short=True)[0].evidence
    )


# ----- still learning, read on validation where it was read often enough late in the run -----------------------
def val_reads(steps: int, span: float, every: int, seed: int = 1) -> dict:
    """Validation reads every `every` steps (and at the end) of a loss falling with time constant `span` steps."""
    rng = np.random.default_rng(seed)
    at = [*range(0, steps, every), steps]
    return {
        "val_steps": at,
        "val_loss_curve": [0.2 + 2.1 * math.exp(-t / span) + 0.01 * rng.standard_normal() for t in at],
    }


def test_a_training_loss_still_falling_on_a_run_whose_validation_flattened_is_not_still_learning():
    thresholds = {**GATED, "overfitting": 2.0}
    training = {"train_loss_curve": loss_curve(600, span=600)}  # still falling: read alone, still_improving
    flat = record(**FELL_SHORT, **training, **val_reads(600, span=30, every=20))
    falling = record(**FELL_SHORT, **training, **val_reads(600, span=600, every=20))
    assert OUTCOME_GATE.learning_curve(features(flat)) == "validation"
    assert not OUTCOME_GATE.still_learning(features(flat)) and OUTCOME_GATE.flattened(features(flat))
    assert diagnose(flat, RULES, thresholds)[0].verdict == UNEXPLAINED  # train longer would not help
    found = diagnose(falling, RULES, thresholds)
    assert found[0].verdict == "still_improving" and found[0].feature == "late_val_fall_z"
    assert "the validation loss was still falling when the run stopped" in found[0].evidence
    assert verdicts(pd.DataFrame([flat, falling]), RULES, thresholds).verdict.tolist() == [
        UNEXPLAINED,
        "still_improving",
    ]
    cut = diagnose(falling, RULES, thresholds, cut_short=True)[0]
    assert "cut while its validation loss still fell" in cut.evidence


def test_with_fewer_than_six_validation_reads_late_in_the_run_the_training_loss_is_read():
    # The grid's cells read validation every 50 of 600 steps: 4 reads in the last quarter, too few for a median
    # and a spread of each half; their still-learning reading is the training loss's, as before.
    sparse = features(record(train_loss_curve=loss_curve(600, span=600), **val_reads(600, span=30, every=50)))
    assert math.isnan(sparse["late_val_fall_z"]) and OUTCOME_GATE.learning_curve(sparse) == "training"
    assert OUTCOME_GATE.still_learning(sparse)
