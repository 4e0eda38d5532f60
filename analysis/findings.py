"""The findings of one run, judged and put in their order: the one pipeline for a grid record and a doctor's run.

`judge` judges the facts a caller can read on the run's measurements, the fitted rules and the outcome gate, adds
the findings the caller's own watches made (the doctor's: a non-finite loss and where it began, the checks across
torch.distributed ranks), and puts each at its `Place` (analysis/checks/base.py: where the order of findings is
declared, first to last). It returns them with the note on what the order left unjudged. analysis/rules.py's
`diagnose` is `judge` on a record (the grid's facts, `GRID_FACTS`), and its `verdicts` puts many records' verdicts
in the same places (`in_place`, `rule_place`, `verdict_without_failure`); doctor/diagnosis.py is `judge` on what the
doctor observed (every fact its watch reads, `JUDGED_FACTS`), and renders what it returns.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from analysis.checks import CHECKS, FITTED
from analysis.checks.base import HEALTHY, UNEXPLAINED, WARNING, Check, Finding, Place, Rule
from analysis.checks.evidence import Evidence
from analysis.checks.schedule import STILL_IMPROVING
from analysis.features import FEATURES, features
from analysis.outcome_gate import OUTCOME_GATE

Item = TypeVar("Item")

# The facts the grid judges too, on its records' columns (padding_in_loss); the others read the doctor's own watch.
GRID_FACTS: list[Check] = [check for check in CHECKS if not check.fitted and check.in_grid]
# Every fact judged on a run's measurements (the doctor's): all but those whose evidence the caller's watch supplies
# (nonfinite_loss: where the first NaN came from), which the caller finds and hands to `judge` as a finding.
JUDGED_FACTS: list[Check] = [check for check in CHECKS if not check.fitted and not check.supplied]

# The fitted rules that read the trained model's accuracy: a model that outputs NaN has none, so on a non-finite
# run they are not judged (the others measure the loop's mechanics, and may say why it went non-finite).
# They are the rules whose feature is computed from a trained accuracy column (each feature declares its columns).
READS_TRAINED_ACCURACY = tuple(
    rule.verdict for rule in FITTED if {"final_val_acc", "final_train_acc"} & set(FEATURES[rule.feature].reads)
)


@dataclass(frozen=True)
class Judged:
    """A run's findings in their order (the first is the verdict), and the note on what was not judged (None: all)."""

    findings: list[Finding]
    note: str | None = None


def in_place(placed: Iterable[tuple[Place, int, Item]]) -> list[tuple[Place, int, Item]]:
    """(place, rank within the place, item) in their order: by `Place`, then by rank (analysis/checks/base.py)."""
    return sorted(placed, key=lambda entry: (entry[0], entry[1]))


def rule_place(rule: Rule, harmed: bool | None) -> Place:
    """Where a fitted rule that fired stands: a WARNING where the run overcame it (the outcome gate), else FAILING."""
    return Place.WARNING if OUTCOME_GATE.is_warning(rule, harmed) else Place.FAILING


def verdict_without_failure(harmed: bool | None, still_learning: bool) -> str:
    """The verdict where nothing fails: still_improving or unexplained_failure where the gate is open, else healthy."""
    verdict = OUTCOME_GATE.verdict_without_failure(harmed)
    return STILL_IMPROVING.verdict if verdict == UNEXPLAINED and still_learning else verdict


@dataclass(frozen=True)
class _Outcome:
    """The outcome gate on one run: open (harm shown), shut, or None (no gate threshold: the naive rules)."""

    harmed: bool | None
    evidence: str | None  # the outcome in the task's metric (None where not judged)
    too_early: bool  # the run was cut before its loss flattened: the gate stays shut, its outcome not judged yet


def _outcome(values: Mapping, fields: Mapping, thresholds: Mapping, cut_short: bool) -> _Outcome:
    gate_threshold, copy_tolerance = thresholds.get(OUTCOME_GATE.name), thresholds.get(OUTCOME_GATE.copy_name)
    harmed = OUTCOME_GATE.is_open(values, gate_threshold, copy_tolerance)
    evidence = None if harmed is None else OUTCOME_GATE.evidence(values, fields, gate_threshold, copy_tolerance)
    too_early = cut_short and harmed is not None and not OUTCOME_GATE.flattened(values)
    if too_early:  # the gate stays shut: the outcome is not judged yet
        return _Outcome(False, OUTCOME_GATE.too_early(values), True)
    return _Outcome(harmed, evidence, False)


def judge(
    measurements: Mapping,
    thresholds: Mapping[str, float],
    rules: Sequence[Rule] = FITTED,
    facts: Sequence[Check] = GRID_FACTS,
    *,
    across_ranks: Sequence[Finding] = (),
    nonfinite: Finding | None = None,
    from_the_start: str | None = None,
    cut_short: bool = False,
    keep_still_improving: bool = False,
) -> Judged:
    """The findings on one run's measurements, each at its `Place`, and the note on what the order left unjudged.

    `facts` are judged on the measurements (keyed like a record), `rules` with `thresholds` (a rule without one is not
    judged; thresholds without the gate's, the naive rules', judge every rule as failing and never say unexplained).
    The findings a caller's watches made: `across_ranks` (doctor/distributed.py), `nonfinite` (doctor/nonfinite.py)
    and, where the run was non-finite from its first step, `from_the_start`: what was (inputs, weights).
    `cut_short`: the run was stopped before its loop ended (a budget, Ctrl-C): until its loss had flattened, its
    outcome is too early to judge (OutcomeGate). `keep_still_improving`: still_improving stays after the failing
    facts where no fitted rule fails (the doctor's lists have kept it so; the grid's drop it, as any verdict
    without a failure).
    """
    measurements = dict(measurements)
    values = features(measurements)
    fields = Evidence(measurements, values)  # the named values the evidence sentences show, made when asked
    outcome = _outcome(values, fields, thresholds, cut_short)
    placed = [(Place.ACROSS_RANKS, rank, found) for rank, found in enumerate(across_ranks)]
    if nonfinite is not None:
        placed.append((Place.NONFINITE, 0, nonfinite))
    for rank, fact in enumerate(facts):
        if nonfinite is not None and fact.fact_place == Place.NUMERIC:  # a non-finite loss takes their place
            continue
        found = fact.judge_fact(measurements)
        if found is not None:
            placed.append((fact.fact_place, rank, found))
    fired = _fired(rules, thresholds, values, fields, outcome)
    if not any(place == Place.FAILING for place, _, _ in fired):
        verdict = _without_failure(rules, thresholds, values, fields, outcome, [f for _, _, f in fired])
        if not placed or (keep_still_improving and verdict.verdict == STILL_IMPROVING.verdict):
            fired.append((Place.WITHOUT_FAILURE, 0, verdict))
    note = None
    if from_the_start is not None:
        fired, note = (
            [],
            (
                f"no fitted rule was judged: the {from_the_start} were non-finite from the first step, and every"
                " measurement the rules read saw them"
            ),
        )
    elif nonfinite is not None:
        fired = [entry for entry in fired if entry[2].verdict not in READS_TRAINED_ACCURACY]
        note = "not judged on a non-finite run, as they read the trained model's accuracy: " + ", ".join(
            READS_TRAINED_ACCURACY
        )
    return Judged([found for _, _, found in in_place([*placed, *fired])], note)


def _fired(
    rules: Sequence[Rule], thresholds: Mapping, values: Mapping, fields: Mapping, outcome: _Outcome
) -> list[tuple[Place, int, Finding]]:
    """The findings of the fitted rules that fired, each FAILING or a WARNING (`rule_place`), in the rules' order."""
    overcame = "whether the run pays for it is" if outcome.too_early else "the run overcame it"
    fired = []
    for rank, rule in enumerate(rules):
        if rule.verdict not in thresholds:  # a thresholds file older than the rule: the rule is not judged
            continue
        value, threshold = values[rule.feature], thresholds[rule.verdict]
        if not rule.fires(value, threshold):
            continue
        evidence = fields.sentence(rule.evidence, value, threshold)
        margin, judged = rule.margin(value, threshold), rule.judged(value, threshold)
        place = rule_place(rule, outcome.harmed)
        if place == Place.WARNING:
            evidence += f"; a warning, not the verdict: {overcame} ({outcome.evidence})"
            found = Finding(rule.verdict, evidence, rule.next_step_for(fields), margin, WARNING, **judged)
        else:
            found = Finding(rule.verdict, evidence, rule.next_step_for(fields), margin, **judged)
        fired.append((place, rank, found))
    return fired


def _without_failure(
    rules: Sequence[Rule],
    thresholds: Mapping,
    values: Mapping,
    fields: Mapping,
    outcome: _Outcome,
    warnings: list[Finding],
) -> Finding:
    """The finding where no fitted rule fails: still_improving, unexplained_failure or healthy (the outcome gate)."""
    verdict = verdict_without_failure(outcome.harmed, OUTCOME_GATE.still_learning(values))
    if verdict == STILL_IMPROVING.verdict:
        return _stopped_learning_early(values, outcome.evidence)
    if verdict == UNEXPLAINED:
        return _unexplained(rules, thresholds, values, fields, outcome.evidence)
    said = f"no failing finding ({len(warnings)} warning{'s' * (len(warnings) != 1)})" if warnings else "no rule fired"
    if outcome.too_early:
        said += f"; {outcome.evidence}"
    return Finding(HEALTHY, said, "nothing to fix in what the checks measure", math.nan)


UNEXPLAINED_NEXT = (
    "overfit one batch (a few dozen steps on 16 examples: the loss must reach near 0), then compare the run step"
    " by step with a simple reference recipe on the same data (the quick references reach the skill above);"
    " look for what the loop changes between the batch and the loss, and at what the optimizer was given"
)


def _unexplained(
    rules: Sequence[Rule], thresholds: Mapping, values: Mapping, fields: Mapping, gate_evidence: str
) -> Finding:
    """The verdict when the outcome shows harm and no check names a cause: what was measured and ruled out."""
    judged = [rule.verdict for rule in rules if rule.verdict in thresholds and not math.isnan(values[rule.feature])]
    evidence = (
        f"the run did not learn as it should ({gate_evidence}), and no check names a cause; ruled out:"
        f" {', '.join(judged) if judged else 'nothing (no check could be read)'}"
    )
    said = _capacity_said(values["capacity_fit"], fields, thresholds.get("model_too_small"))
    return Finding(UNEXPLAINED, f"{evidence}; {said}", UNEXPLAINED_NEXT, math.nan)


def _capacity_said(fit: float, fields: Mapping, threshold: float | None) -> str:
    """What the capacity fit says about a run that fell short for no named cause: whether the model could fit."""
    if math.isnan(fit):
        score = fields.get("capacity_score")
        if score is None or math.isnan(float(score)):
            if fields.get("task") == "sequence":
                return "whether the model can fit the data is not measured on a sequence task (no check would read it)"
            return (
                "whether the model can fit the data was not measured (it takes a model factory, and inputs whose rows"
                " are the examples)"
            )
        return (
            f"a fresh copy of the model, trained in a clean loop on {fields['capacity_examples']:.0f} training"
            f" examples, reaches {fields['metric_name']} {float(score):.2f} on them; with no quick"
            " reference to hold that against (no classes, or references that fit next to nothing), it says neither"
            " that the model is too small nor that it is not"
        )
    said = (
        f"the model fits {fit:.0%} as much of its training examples as quick references do (the better of the run's"
        f" own fit and a fresh copy's, trained in a clean loop on {fields['capacity_examples']:.0f} of them)"
    )
    if threshold is None or fit < threshold:
        return said
    return f"{said}: it has the capacity, so what held the run back is in the run's own loop or recipe"


def _stopped_learning_early(values: Mapping, gate_evidence: str) -> Finding:
    """The verdict of a run that fell short while its loss was still falling: it stopped too early, not failed."""
    feature, z = OUTCOME_GATE.learning_reading(values)
    curve = OUTCOME_GATE.learning_curve(values)
    share = "" if curve == "validation" else f"{values['late_fall_share']:.0%} of its fall so far; "
    evidence = (
        f"the {curve} loss was still falling when the run stopped: across its last quarter it fell {z:.1f} standard"
        f" errors of its own noise ({share}still learning past {OUTCOME_GATE.beyond_noise:.0f}), and the run fell short"
        f" ({gate_evidence}): no check names a fault, it had not finished learning"
    )
    judged = {"feature": feature, "value": float(z), "threshold": OUTCOME_GATE.beyond_noise, "above": True}
    return Finding(STILL_IMPROVING.verdict, evidence, STILL_IMPROVING.next_step, math.nan, **judged)
