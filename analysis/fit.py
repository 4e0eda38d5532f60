"""Fitting the rules' thresholds on the tuned problems: one decision stump per rule, in rule order, per budget.

The tuned problems are scikit-learn's digits and the generated problems of the zoo (datasets named `zoo_*`);
every other dataset is held out. Fault cells whose fault did no measurable harm (analysis/harm.py) are left
out. For each step budget (each cell keeps its measurements at 50, 100, 200, 400 and 600 steps), each rule
sees the records that no earlier rule claimed. Its threshold is the cut on its feature that misclassifies the
fewest of them (the rule's own fault should fire, every other record, healthy ones included, should not: a
false alarm costs as much as a miss); among equally good cuts the one with the widest gap wins, and the
threshold sits in the middle of that gap (the geometric middle for features that span orders of magnitude).
If firing on nothing is strictly better, the threshold lies beyond every value. A rule whose fault has no
record at a budget keeps the longest budget's threshold. Deterministic: the same records give the same file.
"""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.features import FEATURES, at_budget, budgets_of, feature_table
from analysis.harm import harmful
from analysis.rules import RULES, THRESHOLDS_FILE, Rule

TUNED_DATASET = "digits"  # the tuned real dataset; the generated zoo problems are tuned on too


def is_tuned(dataset: str) -> bool:
    """Whether the rules may be fitted on this dataset: digits and the generated zoo problems only."""
    return dataset == TUNED_DATASET or dataset.startswith("zoo_")


def fit_stump(values: pd.Series, positive: pd.Series, above: bool, log: bool) -> float | None:
    """The threshold that best separates `positive` (should fire) from the rest on `values`; None if none can."""
    known = values.notna()
    x, y = values[known].to_numpy(float), positive[known].to_numpy(bool)
    if not y.any():
        return None
    cuts = np.unique(x[np.isfinite(x)])
    if not len(cuts):
        return None
    if not (~y).any():
        # Every record this rule still sees is its own fault (the others lack the measurement, e.g. no tanh
        # units to saturate): fire from half the weakest value on, a cut no pair of values would offer.
        edge = cuts[0] if above else cuts[-1]
        if edge > 0:
            return float(edge * (0.5 if above else 2.0))
        return float(edge - 1.0 if above else edge + 1.0)
    candidates = []
    for low, high in itertools.pairwise(cuts):
        use_log = log and low > 0
        candidates.append(
            (math.sqrt(low * high) if use_log else (low + high) / 2, math.log(high / low) if use_log else high - low)
        )
    # Beyond every value: the rule fires on nothing, chosen only when that is strictly better.
    beyond = cuts[-1] if above else cuts[0]
    far = beyond * (2.0 if above else 0.5) if log and beyond > 0 else beyond + (1.0 if above else -1.0)
    candidates.append((far, -1.0))
    best = None
    for threshold, gap in candidates:
        fires = x > threshold if above else x < threshold
        errors = int((fires != y).sum())
        if best is None or (errors, -gap) < (best[0], -best[1]):
            best = (errors, gap, threshold)
    return float(best[2])


def fit_thresholds(
    records: pd.DataFrame,
    rules: list[Rule] = RULES,
    fallback: dict[str, float] | None = None,
    table: pd.DataFrame | None = None,
) -> dict[str, float]:
    """Thresholds for `rules`, fitted on these records (ok records, one budget) in rule order.

    A rule whose fault no record reaches keeps its `fallback` threshold; without one, that is an error.
    """
    keep = records.status == "ok"
    records = records[keep]
    table = feature_table(records) if table is None else table[keep]
    unclaimed = pd.Series(True, index=records.index)
    thresholds = {}
    for rule in rules:
        positive = records.loc[unclaimed, "diagnosis"] == rule.verdict
        fitted = fit_stump(table.loc[unclaimed, rule.feature], positive, rule.above, FEATURES[rule.feature].log)
        if fitted is None:
            if fallback is None or rule.verdict not in fallback:
                raise ValueError(f"no record of {rule.verdict} reaches its rule: nothing to fit, and no fallback")
            fitted = fallback[rule.verdict]
        thresholds[rule.verdict] = fitted
        fired = table[rule.feature].map(lambda v, r=rule, t=fitted: r.fires(v, t))
        unclaimed = unclaimed & ~fired
    return thresholds


def scored(records: pd.DataFrame) -> pd.DataFrame:
    """The ok records that count for fitting and scoring: healthy ones, and fault cells whose fault did harm."""
    records = records[records.status == "ok"]
    return records[harmful(records)]


def fit_budgets(records: pd.DataFrame, fallback: dict[int, dict[str, float]] | None = None) -> dict[int, dict]:
    """Thresholds per step budget, longest budget first; shorter budgets fall back on the longest one's."""
    result: dict[int, dict[str, float]] = {}
    for budget in sorted(budgets_of(records), reverse=True):
        cut = at_budget(records, budget)
        longest = result[max(result)] if result else None
        fallback_here = (fallback or {}).get(budget) or longest
        result[budget] = fit_thresholds(cut, fallback=fallback_here)
    return dict(sorted(result.items()))


def write_thresholds(records: pd.DataFrame, path: Path = THRESHOLDS_FILE) -> dict[int, dict[str, float]]:
    """Fit on the tuned problems alone (harmless fault cells left out) and write the thresholds file."""
    tuned = scored(records[records.dataset.map(is_tuned)])
    if tuned.empty:
        raise ValueError("no ok records of digits or the zoo problems to fit on: `make zoo` produces them")
    by_budget = fit_budgets(tuned)
    document = {
        "fitted_on": {
            "datasets": sorted(tuned.dataset.unique()),
            "cells": len(tuned),
            "faults": {k: int(v) for k, v in tuned.diagnosis.value_counts().sort_index().items()},
        },
        "budgets": {str(b): {k: float(f"{v:.6g}") for k, v in t.items()} for b, t in by_budget.items()},
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return by_budget
