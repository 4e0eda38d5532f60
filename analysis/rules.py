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

`diagnose` lists the findings (analysis/findings.py judges them and puts each at its place, declared once in
analysis/checks/base.py: `Place`): the grid's facts, every failing rule in rule order (the first is the verdict),
then the warnings. Without a failing finding the verdict is `unexplained_failure` when the gate is open (the run
did not learn as it should and no check names why: "not among the known causes" is a better answer than a wrong
one) and `healthy` otherwise, with the warnings listed under it. `verdicts` puts many records' in the same places.
The fitted rules and the gate read their thresholds from `analysis/thresholds.json`, written by `make fit`
(`analysis.fit`) from digits and the generated problems alone, one set per step budget (50 to 600 steps): a run is
judged with the thresholds of the budget nearest to the steps it ran. `NAIVE_RULES` (analysis/naive_rules.py) is
the first version, with raw readings and thresholds typed in by hand and no gate, kept so that the report shows
what fitting and normalizing changed. Rules see measurements only, never the planted fault.
"""

import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.checks import CHECKS, FITTED
from analysis.checks.base import HEALTHY as HEALTHY  # re-exported: the verdicts without a failure, the finding kinds
from analysis.checks.base import UNEXPLAINED as UNEXPLAINED
from analysis.checks.base import WARNING as WARNING
from analysis.checks.base import Check, Finding, Place, Rule
from analysis.features import FEATURES, feature_table
from analysis.findings import GRID_FACTS, in_place, judge, rule_place, verdict_without_failure
from analysis.outcome_gate import OUTCOME_GATE, gate_open

if TYPE_CHECKING:  # pandas is loaded where a table is judged, so judging one run (the doctor) never loads it
    import pandas as pd

THRESHOLDS_FILE = Path(__file__).resolve().parent / "thresholds.json"


# The fitted checks, in order (analysis/checks/: one module per family of checks, one object per check).
RULES: list[Rule] = FITTED
# GRID_FACTS (analysis/findings.py): the facts the grid judges too, on its records' columns, ahead of the fitted rules
# (padding_in_loss); the others read the doctor's own watch and are judged by the doctor alone (JUDGED_FACTS there).
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


def diagnose(
    measurements: Mapping,
    rules: list[Rule] = RULES,
    thresholds: dict[str, float] | None = None,
    facts: list[Check] = GRID_FACTS,
    cut_short: bool = False,
) -> list[Finding]:
    """The findings on one run's measurements: the verdict first, then the other failing findings, then warnings.

    analysis/findings.py's `judge` on a record, each finding at its place (analysis/checks/base.py: `Place`): the
    `facts` (judged on record columns, no fitted threshold), then the failing rules in order; without one, when the
    outcome gate is open, `still_improving` for a run still learning when it stopped and `unexplained_failure` for
    one that was not, and `healthy` otherwise; the warnings last. `measurements` is a plain mapping (a record as a
    dict or Series, or what the doctor measured); without `thresholds`, those of the budget nearest to the run's
    `steps` are used. Thresholds without the gate's (the naive rules) judge every rule as failing and never say
    unexplained. `cut_short`: the run was stopped before its loop ended (a budget, Ctrl-C): until its loss had
    flattened, its outcome is too early to judge (OutcomeGate).
    """
    measurements = dict(measurements)
    if thresholds is None:
        thresholds = load_thresholds(_known_steps(measurements.get("steps")))
    return judge(measurements, thresholds, rules, facts, cut_short=cut_short).findings


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
        placed = [
            (f.fact_place, rank, f.verdict) for rank, (f, hit) in enumerate(zip(facts, fact_row, strict=True)) if hit
        ]
        placed += [
            (rule_place(r, hurt), rank, r.verdict) for rank, (r, hit) in enumerate(zip(rules, row, strict=True)) if hit
        ]
        listed = in_place(placed)  # each at its place (analysis/checks/base.py: Place), as `diagnose` lists them
        failing.append([found for place, _, found in listed if place.fails])
        warned.append([found for place, _, found in listed if place == Place.WARNING])
        verdict.append(failing[-1][0] if failing[-1] else verdict_without_failure(hurt, still))
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
