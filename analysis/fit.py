"""Fitting the rules' thresholds on the tuned problems: one decision stump per rule, in rule order, per budget.

The tuned problems are scikit-learn's digits and the generated problems of the zoo (datasets named `zoo_*`);
every other dataset is held out. Fault cells whose fault did no measurable harm (analysis/harm.py) are left
out. For each step budget (each cell keeps its measurements at 50, 100, 200, 400 and 600 steps), each rule
sees the records that no earlier rule claimed. Its threshold is the cut on its feature that misclassifies the
fewest of them (the rule's own fault should fire, every other record, healthy ones included, should not: a
false alarm costs as much as a miss); among equally good cuts the one with the widest gap wins, and the
threshold sits in the middle of that gap (the geometric middle for features that span orders of magnitude).
If firing on nothing is strictly better, the threshold lies beyond every value. Deterministic: the same records
give the same file.

At a shorter budget a healthy run is labeled as it was there: still_improving if its own continuation did
measurably better (analysis/harm.py), healthy otherwise. The outcome gate (analysis/outcome_gate.py) is fitted first
at each budget, and a rule that needs harm is fitted only on the records where the gate is open.

Any slice of a grid can be fitted: a rule that cannot be fitted on the records at hand (its fault has no cell
there, every such cell was already named by an earlier rule, or none has the rule's measurement) keeps a
fallback threshold, the committed one (analysis/thresholds.json) unless the caller gives another (a shorter
budget falls back on the longest budget's fit, the longest on the nearest shorter budget that fitted it), and
the reason is reported: each fit returns a `Fit` (one budget) or a `BudgetFits` (every budget), which holds the
thresholds and, for each rule that kept one it was not fitted on, why.
"""

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.features import FEATURES, at_budget, budgets_of, feature_table
from analysis.harm import STILL_IMPROVING, harm_table, harmful, label_stopped_early
from analysis.outcome_gate import OUTCOME_GATE, gate_open
from analysis.rules import RULES, THRESHOLDS_FILE, Rule, load_thresholds

TUNED_DATASET = "digits"  # the tuned real dataset; the generated zoo problems are tuned on too


def is_tuned(dataset: str) -> bool:
    """Whether the rules may be fitted on this dataset: digits and the generated zoo problems only."""
    return dataset == TUNED_DATASET or dataset.startswith("zoo_")


def past(edge: float, upward: bool) -> float:
    """A cut just past an extreme value: twice or half of it when it is positive, else one unit further.

    Scaling keeps the cut in proportion on features that span orders of magnitude; at or under zero there is no
    proportion to keep.
    """
    if edge > 0:
        return float(edge * (2.0 if upward else 0.5))
    return float(edge + (1.0 if upward else -1.0))


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
        # units to saturate): fire from just past the weakest value, a cut no pair of values would offer.
        return past(cuts[0] if above else cuts[-1], upward=not above)
    candidates = []
    for low, high in itertools.pairwise(cuts):
        use_log = log and low > 0
        candidates.append(
            (math.sqrt(low * high) if use_log else (low + high) / 2, math.log(high / low) if use_log else high - low)
        )
    # Just past every value: the rule fires on nothing, chosen only when that is strictly better.
    candidates.append((past(cuts[-1] if above else cuts[0], upward=above), -1.0))
    best = None
    for threshold, gap in candidates:
        fires = x > threshold if above else x < threshold
        errors = int((fires != y).sum())
        if best is None or (errors, -gap) < (best[0], -best[1]):
            best = (errors, gap, threshold)
    return float(best[2])


class NothingToFit(ValueError):
    """A rule cannot be fitted on these records and has no threshold to fall back on."""


@dataclass(frozen=True)
class Fit:
    """The thresholds fitted on records of one budget, and the rules that kept a threshold they were not fitted on."""

    thresholds: dict[str, float]  # verdict -> threshold, in rule order; the outcome gate's first when it has one
    kept: dict[str, str]  # verdict -> why it could not be fitted here (it kept its fallback threshold)


@dataclass(frozen=True)
class BudgetFits:
    """Thresholds per step budget, and per budget the rules that kept a threshold they were not fitted on there."""

    thresholds: dict[int, dict[str, float]]  # budget -> verdict -> threshold, the shortest budget first
    # budget -> verdict -> why, and which threshold it kept instead; in the order fitted (the longest budget first),
    # only the budgets where some rule kept one
    kept: dict[int, dict[str, str]]


def committed_thresholds(steps: int | None = None) -> dict[str, float]:
    """The committed thresholds for the budget nearest `steps`, or {} when the thresholds file is missing."""
    try:
        return load_thresholds(steps)
    except FileNotFoundError:
        return {}


def why_unfitted(records: pd.DataFrame, unclaimed: pd.Series, rule: Rule, harmed: pd.Series | None = None) -> str:
    """Why `rule` cannot be fitted on these records: the sentence the fit and the report print.

    `harmed`: where the outcome gate is open (a rule that needs harm is fitted only there).
    """
    own = records.diagnosis == rule.verdict
    if not own.any():
        return "no cell of its fault in these records"
    if not (own & unclaimed).any():
        return "every cell of its fault was already named by an earlier rule"
    if rule.needs_harm and harmed is not None and not (own & unclaimed & harmed).any():
        return "no cell of its fault opens the outcome gate (the rule needs harm)"
    return f"no cell of its fault has its measurement ({rule.feature})"


def kept_lines(kept: dict[str, str]) -> list[str]:
    """Markdown list items: the rules that kept a threshold they were not fitted on, grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for verdict, why in kept.items():
        by_reason.setdefault(why, []).append(verdict)
    return [f"- {why}: {', '.join(verdicts)}" for why, verdicts in by_reason.items()]


def fit_thresholds(
    records: pd.DataFrame,
    rules: list[Rule] = RULES,
    fallback: dict[str, float] | None = None,
    table: pd.DataFrame | None = None,
    fixed: dict[str, float] | None = None,
    gate: float | None = None,
    copy_tolerance: float | None = None,
) -> Fit:
    """Thresholds for `rules`, fitted on these records (ok records, one budget) in rule order.

    A rule that cannot be fitted here keeps its `fallback` threshold (None: the committed threshold for the
    records' budget), and the fit says why (`Fit.kept`). A rule with no threshold to keep is an error
    (NothingToFit). `fixed` thresholds are taken as given (they still claim the records they fire on).
    `gate` is the outcome gate's threshold (None: the fallback's); a rule that needs harm is fitted, and claims
    records, only where the gate is open (elsewhere its firing is a warning, never the verdict).
    `copy_tolerance` is the gate's tolerance below a clean copy of the model (None: the fallback's). The result
    holds the gate's two thresholds too.
    """
    fixed = fixed or {}
    keep = records.status == "ok"
    records = records[keep]
    table = feature_table(records) if table is None else table[keep]
    if fallback is None:
        steps = records.steps.max() if len(records) else math.nan
        fallback = committed_thresholds(int(steps) if pd.notna(steps) else None)
    gate = fallback.get(OUTCOME_GATE.name) if gate is None else gate
    copy_tolerance = fallback.get(OUTCOME_GATE.copy_name) if copy_tolerance is None else copy_tolerance
    harmed = gate_open(table, gate, copy_tolerance)
    unclaimed = pd.Series(True, index=records.index)
    thresholds = {} if gate is None else {OUTCOME_GATE.name: gate}
    if gate is not None and copy_tolerance is not None:
        thresholds[OUTCOME_GATE.copy_name] = copy_tolerance
    kept: dict[str, str] = {}
    for rule in rules:
        judged = unclaimed & harmed if rule.needs_harm else unclaimed
        positive = records.loc[judged, "diagnosis"] == rule.verdict
        if rule.verdict in fixed:
            fitted = fixed[rule.verdict]
        else:
            fitted = fit_stump(table.loc[judged, rule.feature], positive, rule.above, FEATURES[rule.feature].log)
        if fitted is not None:
            fitted = rule.bounded(fitted)
        if fitted is None:
            why = why_unfitted(records, unclaimed, rule, harmed)
            if rule.verdict not in fallback:
                raise NothingToFit(f"the {rule.verdict} rule cannot be fitted ({why}) and has no threshold to keep")
            fitted = fallback[rule.verdict]
            kept[rule.verdict] = why
        thresholds[rule.verdict] = fitted
        fired = table[rule.feature].map(lambda v, r=rule, t=fitted: r.fires(v, t))
        unclaimed = unclaimed & ~(fired & harmed if rule.needs_harm else fired)
    return Fit(thresholds, kept)


def scored(records: pd.DataFrame) -> pd.DataFrame:
    """The ok records that count for fitting and scoring: healthy ones, and fault cells whose fault did harm."""
    records = records[records.status == "ok"]
    return records[harmful(records)]


def gate_labels(cut: pd.DataFrame, harm: pd.DataFrame) -> pd.Series:
    """What the outcome gate should say on records at a budget: True (harmed), False, or NaN (not read on outcome).

    Harmed: a fault cell whose fault cost accuracy against its healthy twin. Not harmed: a healthy run, or a fault
    cell whose fault cost no accuracy. Faults harmful by definition or by time say nothing about the gate, and
    neither does a healthy run cut while its own continuation still did measurably better (labeled
    still_improving there): at a short budget nearly every run is, and the gate would open on every run that has
    not yet reached the references.
    """
    labels = pd.Series(np.nan, index=cut.index, dtype=object)
    judged = harm.by_outcome.reindex(cut.index, fill_value=False)
    labels[judged] = harm.harmful.reindex(cut.index)[judged]
    healthy = harm.healthy.reindex(cut.index, fill_value=False)
    labels[healthy] = False
    labels[healthy & (cut.diagnosis == STILL_IMPROVING)] = np.nan
    return labels


def fit_gate(cut: pd.DataFrame, table: pd.DataFrame, harm: pd.DataFrame) -> float | None:
    """The outcome gate's threshold on these records at one budget, a stump like any rule's; None if none fits."""
    labels = gate_labels(cut, harm)
    # Within sampling error the gate stays shut whatever its threshold: only the rest can place it.
    known = labels.notna() & ~(table.shortfall_z <= OUTCOME_GATE.beyond_noise)
    return fit_stump(table.loc[known, OUTCOME_GATE.feature], labels[known].astype(bool), above=True, log=False)


# Fewer healthy runs with a clean copy than this place no tolerance at the gate's quantile (0.99: one in a hundred).
COPY_TOLERANCE_MIN_RUNS = 100


def fit_copy_tolerance(cut: pd.DataFrame, table: pd.DataFrame, harm: pd.DataFrame) -> float | None:
    """The outcome gate's tolerance below a clean copy of the model at one budget; None where too few runs place it.

    How far the healthy runs of these records fall short of their own clean copies (`copy_gap`), at the gate's
    quantile (OutcomeGate.copy_quantile): healthy recipes, with their own optimizers, batches and schedules, do not
    all reach what the same model reaches in a full-batch Adam fit, and the gate is to leave them alone. Healthy
    runs cut while their own continuation still did measurably better are left out, as for the gate's threshold.
    """
    if OUTCOME_GATE.copy_quantile is None:  # the copy opens nothing (OutcomeGate.copy_quantile says why)
        return None
    labels = gate_labels(cut, harm)
    healthy = harm.healthy.reindex(cut.index, fill_value=False) & labels.notna()
    gaps = table.loc[healthy, "copy_gap"].dropna()
    if len(gaps) < COPY_TOLERANCE_MIN_RUNS:
        return None
    return float(gaps.quantile(OUTCOME_GATE.copy_quantile))


def fit_budgets(
    records: pd.DataFrame, fallback: dict[int, dict[str, float]] | None = None, harm: pd.DataFrame | None = None
) -> BudgetFits:
    """Thresholds per step budget (the outcome gate's too), fitted longest budget first.

    `records`: ok records with their harmless fault cells (the gate is fitted on those too; the rules only on
    healthy runs and fault cells that did harm). A rule that cannot be fitted at a budget keeps
    `fallback[budget]` if given, else the longest budget's fit; at the longest budget itself, the nearest shorter
    budget's fit where one fitted it, else the committed threshold. The result says why and which it kept
    (`BudgetFits.kept`). `harm`: the records' `harm_table`, if already computed.
    """
    records = records[records.status == "ok"]
    harm = harm_table(records) if harm is None else harm.loc[records.index]
    budgets = sorted(budgets_of(records), reverse=True)
    cuts = {b: label_stopped_early(at_budget(records, b), records) for b in budgets}
    tables = {b: feature_table(cut) for b, cut in cuts.items()}
    gates = {b: fit_gate(cuts[b], tables[b], harm) for b in budgets}
    copy_tolerances = {b: fit_copy_tolerance(cuts[b], tables[b], harm) for b in budgets}
    result: dict[int, dict[str, float]] = {}
    unfitted: dict[int, dict[str, str]] = {}  # budget -> verdict -> why it could not be fitted there
    sources: dict[int, dict[str, str]] = {}  # budget -> verdict -> the threshold it kept instead
    for budget in budgets:
        keep = harm.harmful.reindex(cuts[budget].index)
        cut, table = cuts[budget][keep], tables[budget][keep]
        longest = result[max(result)] if result else None
        given = (fallback or {}).get(budget)
        gate = gates[budget]
        fit = fit_thresholds(
            cut, fallback=given or longest, table=table, gate=gate, copy_tolerance=copy_tolerances[budget]
        )
        result[budget] = fit.thresholds
        reasons = {} if gate is not None else {OUTCOME_GATE.name: "no record here is read on its outcome"}
        reasons.update(fit.kept)
        unfitted[budget] = reasons
        if given:
            source = "the threshold given"
        elif longest:
            source = f"the {max(result)}-step fit"
        else:
            source = "the committed threshold"
        sources[budget] = dict.fromkeys(reasons, source)
    if not fallback:
        _nearest_fit_for_the_longest(result, unfitted, sources)
    kept = {
        budget: {verdict: f"{why}; keeps {sources[budget][verdict]}" for verdict, why in reasons.items()}
        for budget, reasons in unfitted.items()
        if reasons
    }
    return BudgetFits(dict(sorted(result.items())), kept)


def _nearest_fit_for_the_longest(
    result: dict[int, dict[str, float]], unfitted: dict[int, dict[str, str]], sources: dict[int, dict[str, str]]
) -> None:
    """A rule the longest budget could not fit, but a shorter one could, takes the nearest shorter budget's fit.

    The committed threshold is the last resort: it may have been fitted on another feature (still_improving read
    `late_drop_share` before it read the forecast) and the grid plants no cut-short run at the longest budget.
    """
    if len(result) < 2:
        return
    longest, shorter = max(result), sorted((b for b in result if b != max(result)), reverse=True)
    for verdict in unfitted[longest]:
        nearest = next((b for b in shorter if verdict not in unfitted[b]), None)
        if nearest is None or verdict == OUTCOME_GATE.name:
            continue
        result[longest][verdict] = result[nearest][verdict]
        sources[longest][verdict] = f"the {nearest}-step fit, the nearest budget that fitted it"


def write_thresholds(records: pd.DataFrame, path: Path = THRESHOLDS_FILE) -> BudgetFits:
    """Fit on the tuned problems alone (harmless fault cells left out) and write the thresholds file.

    Returns the fit: the thresholds written, and each rule that kept a threshold it was not fitted on here, and why.
    """
    tuned = records[(records.status == "ok") & records.dataset.map(is_tuned)]
    if tuned.empty:
        raise NothingToFit("no ok records of digits or the zoo problems to fit on: `make zoo` produces them")
    harm = harm_table(tuned)
    fits = fit_budgets(tuned, harm=harm)
    tuned = tuned[harm.harmful]  # what `scored` keeps, without judging every twin again
    document = {
        "fitted_on": {
            "datasets": sorted(tuned.dataset.unique()),
            "cells": len(tuned),
            "faults": {k: int(v) for k, v in tuned.diagnosis.value_counts().sort_index().items()},
        },
        "budgets": {str(b): {k: float(f"{v:.6g}") for k, v in t.items()} for b, t in fits.thresholds.items()},
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return fits
