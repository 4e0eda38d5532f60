"""Fitting the rules' thresholds on the tuned dataset: one decision stump per rule, in rule order.

Each rule sees the records that no earlier rule claimed. Its threshold is the cut on its feature that
misclassifies the fewest of them (the rule's own fault should fire, every other should not); among equally
good cuts the one with the widest gap wins, and the threshold sits in the middle of that gap (the geometric
middle for features that span orders of magnitude). Deterministic: the same records give the same file.
"""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.rules import FEATURES, RULES, THRESHOLDS_FILE, Rule, features

TUNED_DATASET = "digits"


def fit_stump(values: pd.Series, positive: pd.Series, above: bool, log: bool) -> float:
    """The threshold that best separates `positive` (should fire) from the rest on `values`."""
    known = values.notna()
    x, y = values[known].to_numpy(float), positive[known].to_numpy(bool)
    if not y.any():
        raise ValueError("no record of this rule's fault reaches it: nothing to fit")
    cuts = np.unique(x)
    if not (~y).any():
        # Every record this rule still sees is its own fault (the others lack the measurement, e.g. no tanh
        # units to saturate): fire from half the weakest value on, a cut no pair of values would offer.
        edge = cuts[0] if above else cuts[-1]
        if edge > 0:
            return float(edge * (0.5 if above else 2.0))
        return float(edge - 1.0 if above else edge + 1.0)
    best = None
    for low, high in itertools.pairwise(cuts):
        use_log = log and low > 0
        threshold = math.sqrt(low * high) if use_log else (low + high) / 2
        fires = x > threshold if above else x < threshold
        errors = int((fires != y).sum())
        gap = math.log(high / low) if use_log else high - low
        if best is None or (errors, -gap) < (best[0], -best[1]):
            best = (errors, gap, threshold)
    if best is None:  # a single distinct value: fire on it and above (or below)
        return float(cuts[0]) * (0.5 if above else 2.0) if cuts[0] > 0 else float(cuts[0]) - 1.0
    return float(best[2])


def fit_thresholds(
    records: pd.DataFrame, rules: list[Rule] = RULES, fallback: dict[str, float] | None = None
) -> dict[str, float]:
    """Thresholds for `rules`, fitted on these records (ok records only) in rule order.

    A rule whose fault no record reaches keeps its `fallback` threshold, if one is given (refitting on a
    subset of the faults); without one, that is an error.
    """
    records = records[records.status == "ok"]
    table = features(records)
    unclaimed = pd.Series(True, index=records.index)
    thresholds = {}
    for rule in rules:
        reach = unclaimed
        positive = records.loc[reach, "diagnosis"] == rule.verdict
        if fallback is not None and not (positive & table.loc[reach, rule.feature].notna()).any():
            thresholds[rule.verdict] = fallback[rule.verdict]
        else:
            thresholds[rule.verdict] = fit_stump(
                table.loc[reach, rule.feature], positive, rule.above, FEATURES[rule.feature][1]
            )
        fired = table[rule.feature].map(lambda v, r=rule: r.fires(v, thresholds[r.verdict]))
        unclaimed = unclaimed & ~fired
    return thresholds


def write_thresholds(records: pd.DataFrame, path: Path = THRESHOLDS_FILE) -> dict[str, float]:
    """Fit on the tuned dataset alone and write the thresholds file the rules read."""
    tuned = records[(records.dataset == TUNED_DATASET) & (records.status == "ok")]
    if tuned.empty:
        raise ValueError(f"no ok records of the tuned dataset {TUNED_DATASET!r} to fit on")
    thresholds = fit_thresholds(tuned)
    document = {
        "fitted_on": {
            "dataset": TUNED_DATASET,
            "cells": len(tuned),
            "faults": {k: int(v) for k, v in tuned.diagnosis.value_counts().sort_index().items()},
        },
        "thresholds": {k: float(f"{v:.6g}") for k, v in thresholds.items()},
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document["thresholds"]
