"""The outcome gate: did the run pay for what the checks found? Open when it learned measurably less than it could.

A check of a structural oddity or a risk (`needs_harm`) gives a failing finding only where the gate is open, a
warning otherwise; without a failing finding an open gate gives `unexplained_failure` (or `still_improving` for a
run still learning when it stopped), a shut one `healthy` (analysis/rules.py: `diagnose`, `verdicts`). `OutcomeGate`
says how it reads the outcome features (analysis/declarations/outcome.py), `OUTCOME_GATE` is the one the rules use,
with its threshold fitted by `make fit` (analysis/fit.py) under its `name`, and `gate_open` reads it on a whole
feature table.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analysis.checks.base import HEALTHY, UNEXPLAINED, Rule
from analysis.loss_curves import LATE_STEPS

if TYPE_CHECKING:  # pandas is loaded where a table is judged, so judging one run (the doctor) never loads it
    import pandas as pd


@dataclass(frozen=True)
class OutcomeGate:
    """Did the run pay for what the checks found? Open when it learned measurably less than it could.

    Where quick references exist (one class per example), open when the run's skill (validation, else
    training) falls short of the references' by more than the fitted share of theirs (`skill_shortfall`, stored
    in the thresholds file under `name`) and its accuracy lies more than `beyond_noise` standard errors below
    theirs (`shortfall_z`: the tolerance of the harm test in analysis/harm.py; a few points on a small validation
    set are sampling error, not harm). The references know nothing of the model, and a broken run of a strong
    model can still beat them; so where a clean copy of the run's own model was scored on validation (the
    capacity fit's copy: harness/instruments/memorization.py; none without a model factory), the gate also opens
    when the run's skill falls short of the copy's by more than the copy's tolerance (`copy_gap`, stored under
    `copy_name`: how far healthy runs of the fitting data fall short of their own copies, at the quantile
    `copy_quantile`; healthy recipes, with their own optimizers and batches, do not all reach a full-batch Adam
    fit) and more than `beyond_noise` standard errors (`copy_z`). That route is built and tested but left off:
    `copy_quantile` is None, so `make fit` writes no tolerance and the thresholds file gives the copy none (the
    figures that decided it are at `copy_quantile`). On next-token prediction where the text's token
    counts are known (the grid's language models: harness/text.py; a user's next-token run with validation: the
    doctor counts its tokens), open when the
    validation loss lies above the better of the unigram and bigram counts' by more than `beyond_noise` standard
    errors of theirs (`loss_over_counts` at 1 + 2 `counts_noise` or more), also a fact: a trained language model
    that predicts worse than counting which token follows which has learned nothing a table could not. Where no
    yardstick exists (regression, multi-label, a sequence task without validation or that is not next-token
    prediction), open when the training loss ended at `loss_stalled` or more of its first value, or the validation
    skill (R², per-label accuracy above the baseline) is at or under 0: a fact, not a fit.

    Where the gate opens and no check names a cause, a run whose training loss was still falling beyond its noise
    over its last quarter (`late_fall_z` over `beyond_noise`: `still_learning`) stopped too early: its verdict is
    `still_improving`, never `unexplained_failure`, which is for a run that stopped learning and fell short. And a
    run cut short by its user (a step or time budget, Ctrl-C: `diagnose(cut_short=True)`) is judged on its outcome
    only once its loss had flattened (`flattened`: not still learning, and under `flat_share` of its fall so far in
    its last quarter); before that the outcome is too early to judge, and the gate stays shut. Both read the run's
    own noise and fall, so the same at 20 steps and at 20,000: facts, not fits.
    """

    name: str = "outcome_gate"
    feature: str = "skill_shortfall"
    loss_stalled: float = 0.9  # the loss fell by less than a tenth over the whole run: it did not learn
    beyond_noise: float = 2.0  # standard errors: what the harm test counts as a measurable difference
    counts: float = 1.0  # the validation loss over the token counts': no better than counting which token follows which
    copy_name: str = "outcome_gate_copy"  # the copy's tolerance, in the thresholds file
    # The copy's tolerance: this quantile of healthy runs' copy_gap on the fitting data; None: the copy opens nothing
    # (`make fit` writes no tolerance). Left off: on the zoo, leave one problem out at 600 steps, the copy at the
    # 0.99 quantile raised false alarms from 5 to 10 of 619 healthy runs and named 454 planted faults of 507 against
    # 452 (0.998: 8 and 451). The doctor says the copy's reading on its report instead (Report.clean_copy_line).
    copy_quantile: float | None = None
    # A run whose loss has flattened puts next to nothing of its fall into its last quarter: under a tenth.
    flat_share: float = 0.1
    # the features it needs
    reads: tuple[str, ...] = (
        "late_fall_z",
        "late_val_fall_z",
        "late_fall_share",
        "skill_shortfall",
        "shortfall_z",
        "loss_over_counts",
        "loss_left",
        "own_skill",
        "reference_skill",
        "copy_skill",
        "copy_gap",
        "copy_z",
        "counts_noise",
    )

    def is_open(self, values: Mapping, threshold: float | None, copy_tolerance: float | None = None) -> bool | None:
        """True (harm shown), False (no harm), or None when this gate has no threshold (the naive rules).

        `copy_tolerance`: the clean copy's (None or NaN: the copy is not read).
        """
        if threshold is None or math.isnan(threshold):
            return None
        by_references, by_copy = self._by_references(values, threshold), self._by_copy(values, copy_tolerance)
        if by_references is not None or by_copy is not None:
            return bool(by_references or by_copy)
        over_counts = values["loss_over_counts"]
        if not math.isnan(over_counts):
            return bool(over_counts >= self._counts_open_at(values))
        left, skill = values["loss_left"], values["own_skill"]
        return bool(left >= self.loss_stalled or skill <= 0)

    def learning_reading(self, values: Mapping) -> tuple[str, float]:
        """The feature the still-learning reading reads, and its value on this run.

        The validation loss's fall (`late_val_fall_z`) where validation was read at least LATE_VAL_READS times in the
        run's last quarter: a training loss that still falls while validation has flattened is no run to train
        longer. Else the training loss's (`late_fall_z`).
        """
        feature = "late_val_fall_z" if math.isfinite(values.get("late_val_fall_z", math.nan)) else "late_fall_z"
        return feature, values[feature]

    def learning_curve(self, values: Mapping) -> str:
        """Which loss the still-learning reading reads: "validation" or "training" (`learning_reading`)."""
        return "validation" if self.learning_reading(values)[0] == "late_val_fall_z" else "training"

    def still_learning(self, values: Mapping) -> bool:
        """The run's loss still fell across its last quarter, by more than `beyond_noise` standard errors."""
        return bool(self.learning_reading(values)[1] > self.beyond_noise)

    def flattened(self, values: Mapping) -> bool:
        """The loss had stopped falling: not still learning, and under `flat_share` of its fall in its last quarter.

        On validation (as `still_learning`), not still learning is enough: held-out loss that no longer falls is the
        run's own end. False where it cannot be read (a run under LATE_STEPS steps): too early to judge.
        """
        if self.still_learning(values):
            return False
        return self.learning_curve(values) == "validation" or bool(values["late_fall_share"] <= self.flat_share)

    def too_early(self, values: Mapping) -> str:
        """Why the outcome of a run cut before its loss flattened is not judged (the report's words)."""
        z, share = values["late_fall_z"], values["late_fall_share"]
        if self.learning_curve(values) == "validation":
            return (
                "too early to judge the outcome: the run was cut while its validation loss still fell (its last quarter"
                f" fell {values['late_val_fall_z']:.1f} standard errors; judged once it falls by no more than"
                f" {self.beyond_noise:.0f})"
            )
        if math.isnan(z):
            return f"too early to judge the outcome: the run was cut before {LATE_STEPS} training steps"
        return (
            "too early to judge the outcome: the run was cut while its training loss had not flattened (its last"
            f" quarter fell {z:.1f} standard errors, {share:.0%} of its fall so far; judged once it falls by no more"
            f" than {self.beyond_noise:.0f} standard errors and under {self.flat_share:.0%})"
        )

    def _counts_open_at(self, values: Mapping) -> float:
        """Where the gate opens on loss_over_counts: 1, plus `beyond_noise` standard errors of the counts' loss."""
        return self.counts + self.beyond_noise * np.nan_to_num(values["counts_noise"])

    def _by_references(self, values: Mapping, threshold: float) -> bool | None:
        """Whether the run fell measurably short of the quick references (None: there are none)."""
        shortfall = values[self.feature]
        if math.isnan(shortfall):
            return None
        return shortfall > threshold and not values["shortfall_z"] <= self.beyond_noise

    def _by_copy(self, values: Mapping, tolerance: float | None) -> bool | None:
        """Whether the run fell measurably short of a clean copy of its model (None: no copy, or no tolerance)."""
        gap = values["copy_gap"]
        if tolerance is None or math.isnan(tolerance) or math.isnan(gap):
            return None
        return gap > tolerance and not values["copy_z"] <= self.beyond_noise

    def is_warning(self, rule: "Rule", harmed: bool | None) -> bool:
        """Whether a rule that fired gives a warning rather than a failing finding on a run the gate judged so."""
        return rule.needs_harm and harmed is not None and not harmed

    @staticmethod
    def verdict_without_failure(harmed: bool | None) -> str:
        """The verdict when no finding fails: unexplained where the gate shows harm, else healthy."""
        return UNEXPLAINED if harmed else HEALTHY

    def evidence(self, values: Mapping, fields: Mapping, threshold: float, copy_tolerance: float | None = None) -> str:
        """What the outcome was, in the task's own metric: the sentence under a failing verdict or a warning."""
        metric = fields["metric_name"]
        own, scale = values["own_skill"], "0 = the baseline, 1 = perfect"
        by_copy = self._by_copy(values, copy_tolerance)
        if by_copy:  # the copy opened it: the references may have been beaten
            return (
                f"the run's {metric} skill {own:.2f} fell {values['copy_gap']:.2f} short of a clean copy of this"
                f" model's {values['copy_skill']:.2f} (the same model fitted in a clean loop; {scale}),"
                f" {values['copy_z']:.1f} standard errors below it (the gate opens past {copy_tolerance:.2f}, as far"
                f" as healthy runs fall short of their own copies, and {self.beyond_noise:.0f} standard errors)"
            )
        shortfall = values[self.feature]
        if not math.isnan(shortfall):
            reference = values["reference_skill"]
            if shortfall <= 0:
                said = (
                    f"the run's {metric} skill {own:.2f} reached the quick references' {reference:.2f} ({scale}; the"
                    f" gate opens when it falls more than {threshold:.0%} of theirs short)"
                )
            else:
                said = (
                    f"the run's {metric} skill {own:.2f} fell {shortfall:.0%} short of the quick references'"
                    f" {reference:.2f} ({scale}), {values['shortfall_z']:.1f} standard errors below them (the gate"
                    f" opens past {threshold:.0%} and {self.beyond_noise:.0f} standard errors)"
                )
            if by_copy is not None:
                said += (
                    f"; a clean copy of this model reaches {values['copy_skill']:.2f} (the gate opens"
                    f" {copy_tolerance:.2f} below it)"
                )
            return said
        over_counts = values["loss_over_counts"]
        if not math.isnan(over_counts):
            opens = self._counts_open_at(values)
            return (
                f"the validation loss ended at {over_counts:.2f}x the token counts' on the same text (the better of"
                " counts of each token and of which token follows which, on the training text; the gate opens at"
                f" {opens:.3f}x: no better than such a table, {self.beyond_noise:.0f} standard errors of its loss"
                " included)"
            )
        return (
            f"no quick reference for this task; the training loss ended at {values['loss_left']:.0%} of its first"
            f" value (the gate opens at {self.loss_stalled:.0%}) and the {metric} skill is {values['own_skill']:.2f}"
            " (it opens at 0 or under)"
        )


OUTCOME_GATE = OutcomeGate()


def gate_open(table: "pd.DataFrame", threshold: float | None, copy_tolerance: float | None = None) -> "pd.Series":
    """The outcome gate on each row of a feature table: True where the run's outcome shows harm."""
    import pandas as pd

    if threshold is None or math.isnan(threshold):
        return pd.Series(True, index=table.index)
    rows = table[list(OUTCOME_GATE.reads)].to_dict("records")
    return pd.Series([bool(OUTCOME_GATE.is_open(row, threshold, copy_tolerance)) for row in rows], index=table.index)
