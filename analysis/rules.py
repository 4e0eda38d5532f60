"""The rules: an ordered list of readable checks over the features, each naming a verdict, and the outcome gate.

Each check is one object, defined in its family's module of analysis/checks/ (its rule, order, recipe parts,
fault types and harm test); `RULES` here is the fitted ones in order.

A rule fires when one feature (analysis/features.py: every one normalized by something the run itself
provides) crosses a named threshold. What a fired rule means depends on the kind of check it is (`needs_harm`):

- a check of the loop, the recipe or the data that is wrong whatever the run reached (a forgotten zero_grad,
  validation in training mode, probabilities handed to cross_entropy, labels nothing can learn) gives a
  *failing* finding on its own evidence;
- a structural oddity or a risk (dead ReLUs or large activations at initialization, inputs at a large scale, a
  train-validation gap, a small rate) gives a failing finding only when the run's outcome shows harm: the
  outcome gate (`OUTCOME_GATE`) is open. Otherwise it is a *warning*: the run overcame it.

The outcome gate (analysis/outcome_gate.py) is open when the run learned measurably less than quick references
reach on the same data (`skill_shortfall` above its fitted threshold) or, where no reference exists (regression,
multi-label), when its training loss did not fall or its validation skill is at or under the baseline.

`diagnose` lists the findings: every failing one in rule order (the first is the verdict), then the warnings.
Without a failing finding the verdict is `unexplained_failure` when the gate is open (the run did not learn as
it should and no check names why: "not among the known causes" is a better answer than a wrong one) and
`healthy` otherwise, with the warnings listed under it. The fitted rules and the gate read their thresholds
from `analysis/thresholds.json`, written by `make fit` (`analysis.fit`) from digits and the generated problems
alone, one set per step budget (50 to 600 steps): a run is judged with the thresholds of the budget nearest to
the steps it ran. `NAIVE_RULES` (analysis/naive_rules.py) is the first version, with raw readings and thresholds
typed in by hand and no gate, kept so that the report shows what fitting and normalizing changed. Rules see
measurements only, never the planted fault.
"""

import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.checks import CHECKS, FITTED
from analysis.checks.base import HEALTHY, UNEXPLAINED, WARNING, Check, Finding, Rule
from analysis.checks.evidence import Evidence
from analysis.checks.schedule import STILL_IMPROVING
from analysis.features import FEATURES, feature_table, features
from analysis.outcome_gate import OUTCOME_GATE, gate_open

if TYPE_CHECKING:  # pandas is loaded where a table is judged, so judging one run (the doctor) never loads it
    import pandas as pd

THRESHOLDS_FILE = Path(__file__).resolve().parent / "thresholds.json"


# The fitted checks, in order (analysis/checks/: one module per family of checks, one object per check).
RULES: list[Rule] = FITTED
# The facts the grid judges too, on its records' columns, ahead of the fitted rules (padding_in_loss); the numeric
# facts read the doctor's own watch and are judged by the doctor alone (doctor/diagnosis.py judges every fact itself).
GRID_FACTS: list[Check] = [check for check in CHECKS if not check.fitted and check.in_grid]
VERDICTS = {rule.verdict: rule for rule in RULES}


def load_thresholds(steps: int | None = None, path: str | Path = THRESHOLDS_FILE) -> dict[str, float]:
    """The fitted thresholds, by verdict, of the step budget nearest to `steps` (None: the longest budget)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no fitted thresholds at {path}: `make fit` writes them from the records")
    by_budget = {int(b): t for b, t in json.loads(path.read_text())["budgets"].items()}
    budget = max(by_budget) if steps is None else nearest_budget(steps, list(by_budget))
    unfitted = [rule.verdict for rule in RULES if rule.verdict not in by_budget[budget]]
    if unfitted:  # a check added since the last fit: said, not silently never judged
        warnings.warn(
            f"not judged until `make fit` fits their thresholds ({path.name} has none): {', '.join(unfitted)}",
            stacklevel=2,
        )
    return {verdict: float(value) for verdict, value in by_budget[budget].items()}


def nearest_budget(steps: int, budgets: list[int]) -> int:
    """The budget closest to `steps` on a log scale (a run of 140 steps is judged as a 100-step run)."""
    return min(budgets, key=lambda b: (abs(math.log(max(steps, 1) / b)), b))


def fitted_budgets(path: str | Path = THRESHOLDS_FILE) -> list[int]:
    """The step budgets the thresholds file has thresholds for."""
    return sorted(int(b) for b in json.loads(Path(path).read_text())["budgets"])


UNEXPLAINED_NEXT = (
    "overfit one batch (a few dozen steps on 16 examples: the loss must reach near 0), then compare the run step"
    " by step with a simple reference recipe on the same data (the quick references reach the skill above);"
    " look for what the loop changes between the batch and the loss, and at what the optimizer was given"
)


def _unexplained(
    rules: list[Rule], thresholds: Mapping, values: Mapping, fields: Mapping, gate_evidence: str
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


def diagnose(
    measurements: Mapping,
    rules: list[Rule] = RULES,
    thresholds: dict[str, float] | None = None,
    facts: list[Check] = GRID_FACTS,
    cut_short: bool = False,
) -> list[Finding]:
    """The findings on one run's measurements: the verdict first, then the other failing findings, then warnings.

    The verdict is the first failing finding, the `facts` first (judged on record columns, no fitted threshold),
    then the rules in order; without one, when the outcome gate is open, `still_improving` for a run still
    learning when it stopped and `unexplained_failure` for one that was not, and `healthy` otherwise.
    `measurements` is a plain mapping (a record as a dict or Series, or what the doctor measured); without
    `thresholds`, those of the budget nearest to the run's `steps` are used. Thresholds without the gate's (the naive
    rules) judge every rule as failing and never say unexplained. `cut_short`: the run was stopped before its loop
    ended (a budget, Ctrl-C): until its loss had flattened, its outcome is too early to judge (OutcomeGate).
    """
    measurements = dict(measurements)
    if thresholds is None:
        steps = measurements.get("steps")
        thresholds = load_thresholds(_known_steps(steps))
    values = features(measurements)
    fields = Evidence(measurements, values)  # the named values the evidence sentences show, made when asked
    gate_threshold, copy_tolerance = thresholds.get(OUTCOME_GATE.name), thresholds.get(OUTCOME_GATE.copy_name)
    harmed = OUTCOME_GATE.is_open(values, gate_threshold, copy_tolerance)
    gate_evidence = None if harmed is None else OUTCOME_GATE.evidence(values, fields, gate_threshold, copy_tolerance)
    too_early = cut_short and harmed is not None and not OUTCOME_GATE.flattened(values)
    if too_early:  # the gate stays shut: the outcome is not judged yet
        harmed, gate_evidence = False, OUTCOME_GATE.too_early(values)
    overcame = "whether the run pays for it is" if too_early else "the run overcame it"
    failing = [found for found in (fact.judge_fact(measurements) for fact in facts) if found is not None]
    warnings = []
    for rule in rules:
        if rule.verdict not in thresholds:  # a thresholds file older than the rule: the rule is not judged
            continue
        value, threshold = values[rule.feature], thresholds[rule.verdict]
        if rule.fires(value, threshold):
            evidence = fields.sentence(rule.evidence, value, threshold)
            margin, judged = rule.margin(value, threshold), rule.judged(value, threshold)
            if OUTCOME_GATE.is_warning(rule, harmed):
                evidence += f"; a warning, not the verdict: {overcame} ({gate_evidence})"
                warnings.append(Finding(rule.verdict, evidence, rule.next_step_for(fields), margin, WARNING, **judged))
            else:
                failing.append(Finding(rule.verdict, evidence, rule.next_step_for(fields), margin, **judged))
    if failing:
        return failing + warnings
    if OUTCOME_GATE.verdict_without_failure(harmed) == UNEXPLAINED:
        if OUTCOME_GATE.still_learning(values):
            return [_stopped_learning_early(values, gate_evidence), *warnings]
        return [_unexplained(rules, thresholds, values, fields, gate_evidence), *warnings]
    said = f"no failing finding ({len(warnings)} warning{'s' * (len(warnings) != 1)})" if warnings else "no rule fired"
    if too_early:
        said += f"; {gate_evidence}"
    return [Finding(HEALTHY, said, "nothing to fix in what the checks measure", math.nan), *warnings]


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


def _known_steps(steps) -> int | None:
    """A record's step count as an int, or None where it is missing (None, NaN, or pandas' NA)."""
    try:
        return None if steps is None or math.isnan(float(steps)) else int(steps)
    except TypeError:  # pandas' NA refuses float()
        return None


def verdicts(
    records: "pd.DataFrame",
    rules: list[Rule] = RULES,
    thresholds: dict[str, float] | None = None,
    table: "pd.DataFrame | None" = None,
    facts: list[Check] = GRID_FACTS,
) -> "pd.DataFrame":
    """For each record: the verdict, every failing verdict in order (`fired`), and the warnings.

    `table`: the records' feature table, if already computed. The same logic as `diagnose`, on many records.
    """
    import pandas as pd

    thresholds = load_thresholds() if thresholds is None else thresholds
    table = feature_table(records) if table is None else table
    gate_threshold = thresholds.get(OUTCOME_GATE.name)
    judged = gate_threshold is not None and not math.isnan(gate_threshold)
    copy_tolerance = thresholds.get(OUTCOME_GATE.copy_name)
    harmed = gate_open(table, gate_threshold, copy_tolerance).tolist() if judged else [None] * len(table)
    fired = np.array(
        [[rule.fires(v, thresholds.get(rule.verdict, math.nan)) for v in table[rule.feature]] for rule in rules]
    ).T.reshape(len(table), len(rules))
    # A record written before a fact's column existed has no value for it: not judged, as NaN is not.
    facts_fired = np.array(
        [
            [fact.fires(v, fact.fact) for v in pd.to_numeric(records[fact.feature], errors="coerce").astype(float)]
            if fact.feature in records
            else [False] * len(records)
            for fact in facts
        ]
    ).T.reshape(len(records), len(facts))
    learning = [
        OUTCOME_GATE.still_learning({"late_fall_z": z, "late_val_fall_z": v})
        for z, v in zip(table["late_fall_z"], table["late_val_fall_z"], strict=True)
    ]
    verdict, failing, warned = [], [], []
    for row, fact_row, hurt, still in zip(fired, facts_fired, harmed, learning, strict=True):
        hits = [rule for rule, hit in zip(rules, row, strict=True) if hit]
        said = [fact.verdict for fact, hit in zip(facts, fact_row, strict=True) if hit]
        failing.append(said + [r.verdict for r in hits if not OUTCOME_GATE.is_warning(r, hurt)])
        warned.append([r.verdict for r in hits if OUTCOME_GATE.is_warning(r, hurt)])
        unnamed = OUTCOME_GATE.verdict_without_failure(hurt)
        unnamed = STILL_IMPROVING.verdict if unnamed == UNEXPLAINED and still else unnamed
        verdict.append(failing[-1][0] if failing[-1] else unnamed)
    return pd.DataFrame({"verdict": verdict, "fired": failing, "warnings": warned}, index=records.index)


def rules_table(thresholds_path: str | Path = THRESHOLDS_FILE) -> str:
    """The rules as a markdown table: order, verdict, feature, what it is normalized by, and its thresholds.

    docs/rules.md carries it (`make docs` writes it there; a test fails when the page is stale).
    """
    budgets = fitted_budgets(thresholds_path)
    by_budget = {b: load_thresholds(b, thresholds_path) for b in budgets}
    header = ["order", "verdict", "kind", "fires when", "normalized by", *(f"at {b} steps" for b in budgets)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for check in CHECKS:
        if check.fitted:
            continue
        # A fact, not a fit: judged before every fitted rule, on a record column (analysis/checks/numerics.py).
        sign = ">" if check.above else "<"
        cells = [
            "first",
            f"`{check.verdict}`",
            "on its own",
            f"`{check.feature}` (a record column) {sign} threshold",
            "nothing: the threshold is a fact, not fitted",
            *(f"{check.fact:.3g}" for _ in budgets),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for order, rule in enumerate(RULES, 1):
        feature = FEATURES[rule.feature]
        sign = ">" if rule.above else "<"
        cells = [
            str(order),
            f"`{rule.verdict}`",
            "needs harm" if rule.needs_harm else "on its own",
            f"{feature.sentence} (`{rule.feature}`) {sign} threshold",
            feature.normalized_by,
            *(f"{by_budget[b][rule.verdict]:.3g}" if rule.verdict in by_budget[b] else "not fitted" for b in budgets),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    gate = FEATURES[OUTCOME_GATE.feature]
    cells = [
        "gate",
        f"`{OUTCOME_GATE.name}`",
        "opens",
        f"{gate.sentence} (`{OUTCOME_GATE.feature}`) > threshold",
        gate.normalized_by,
        *(f"{by_budget[b].get(OUTCOME_GATE.name, math.nan):.3g}" for b in budgets),
    ]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
