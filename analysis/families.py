"""Other model families: the rules fitted on the MLP, scored on other families without refitting, then with.

Reads the records of `make families` (a small CNN on digits, a GRU on a generated sequence task; every fault,
5 seeds). `rules` uses the thresholds fitted on the MLP's runs on digits and the zoo problems
(`analysis/thresholds.json`): the families were never seen while fitting, so these scores are held out.
`rules-refit` refits the thresholds on the family's own records, leaving out the seed it scores
(leave-one-seed-out), to show what carrying the rules over costs; a rule whose fault the family's records lack
keeps the committed threshold. Fault cells whose fault did no measurable harm against their healthy twin are
left out (analysis/harm.py).
"""

import pandas as pd

from analysis.harm import harmful
from analysis.rules import RULES, load_thresholds, verdicts
from analysis.score import budgets, leave_one_seed_out

METHODS = ("rules", "rules-refit")
ROLES = {"rules": "held-out", "rules-refit": "refit-loso"}


def predictions(
    records: pd.DataFrame, thresholds: dict[str, float] | None = None, kept: dict[str, str] | None = None
) -> pd.DataFrame:
    """The verdict of each method for every ok single-fault record (rules-refit: None with a single seed).

    `kept`, if given, receives the rules the refits could not fit on the family's records, and why.
    """
    records = records[(records.status == "ok") & (records.verdicts.str.len() == 1)]
    records = records[harmful(records)]  # a fault that did no harm there is no fault to find
    fitted = load_thresholds() if thresholds is None else thresholds
    # With a single seed there is nothing to refit on: such a family has no rules-refit verdicts (None), and its
    # refit score is left out rather than counted as misses.
    refit = [
        leave_one_seed_out(group, "rules", fallback=fitted, kept=kept)
        for _, group in records.groupby(["model", "dataset"])
        if group.seed.nunique() > 1
    ]
    return pd.DataFrame(
        {
            "family": records.model,
            "dataset": records.dataset,
            "steps": budgets(records),
            "diagnosis": records.diagnosis,
            "rules": verdicts(records, RULES, fitted).verdict,
            "rules-refit": pd.concat(refit).reindex(records.index) if refit else None,
        },
        index=records.index,
    )


def accuracy(table: pd.DataFrame) -> pd.DataFrame:
    """Correct verdicts per family, dataset and method."""
    rows = []
    for (family, dataset), group in table.groupby(["family", "dataset"]):
        steps = ",".join(str(s) for s in sorted(group.steps.unique()))
        for method in METHODS:
            judged = group[group[method].notna()]
            if judged.empty:
                continue  # rules-refit on a single seed: nothing was refitted
            correct = int((judged[method] == judged.diagnosis).sum())
            rows.append((family, dataset, method, correct, len(judged), ROLES[method], steps))
    return pd.DataFrame(rows, columns=["family", "dataset", "method", "correct", "total", "role", "steps"])


def per_fault(table: pd.DataFrame) -> pd.DataFrame:
    """Correct / cells per planted verdict (rows) and family x method (columns)."""
    columns = {}
    for family, group in table.groupby("family"):
        for method in METHODS:
            judged = group[group[method].notna()]
            if judged.empty:
                continue
            hits = (judged[method] == judged.diagnosis).groupby(judged.diagnosis)
            columns[f"{family} {method}"] = hits.sum().astype(str) + "/" + hits.size().astype(str)
    return pd.DataFrame(columns).fillna("").rename_axis("planted")
