"""Other model families: the rules fitted on the MLP, scored on other families without refitting, then with.

Reads the records of `make families` (a small CNN on digits, a GRU and a transformer encoder on a generated
sequence task; every fault, 5 seeds). `rules` uses the thresholds fitted on the MLP's runs on digits and the zoo
problems (`analysis/thresholds.json`): the families were never seen while fitting, so these scores are held out.
`rules-refit` refits the thresholds on the family's own records, leaving out the seed it scores
(leave-one-seed-out), to show what carrying the rules over costs; a rule whose fault the family's records lack
keeps the committed threshold. Fault cells whose fault did no measurable harm against their healthy twin are
left out (analysis/harm.py). `parts` builds what both `python -m analysis families` (`printout`) and the
report's section (analysis/sections.py's families_section) show.
"""

from pathlib import Path

import pandas as pd

from analysis import tables
from analysis.fit import NothingToFit, kept_lines
from analysis.harm import harmful
from analysis.rules import RULES, load_thresholds, verdicts
from analysis.score import accuracy_lines, budgets, leave_one_seed_out

METHODS = ("rules", "rules-refit")
ROLES = {"rules": "held-out", "rules-refit": "refit-loso"}


def predictions(
    records: pd.DataFrame, thresholds: dict[str, float] | None = None, kept: dict[str, str] | None = None
) -> pd.DataFrame:
    """The verdict of each method for every ok single-fault record (rules-refit: None with a single seed).

    `kept`, if given, receives the rules the refits could not fit on the family's records, and why.
    """
    records = single(records)
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


def single(records: pd.DataFrame) -> pd.DataFrame:
    """The ok records with one fault planted (healthy included): those the families are scored on."""
    return records[(records.status == "ok") & (records.verdicts.str.len() == 1)]


def harmless(records: pd.DataFrame) -> pd.DataFrame:
    """The ok single-fault records left out of the scores: their fault did no measurable harm."""
    one = single(records)
    return one[~harmful(one)]


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


def single_seed(table: pd.DataFrame, summary: pd.DataFrame) -> list[str]:
    """Families with no rules-refit score: a single seed, nothing to leave one out of."""
    return sorted(set(table.family) - set(summary.family[summary.method == "rules-refit"]))


def parts(records: pd.DataFrame, folder: Path) -> tuple[list[tables.Part], pd.DataFrame]:
    """What the report's section and the `families` command both show, and the scores behind the accuracy lines.

    Raises NothingToFit when no ok single-fault record is left to score.
    """
    kept: dict[str, str] = {}
    table = predictions(records, kept=kept)
    if table.empty:
        raise NothingToFit(f"no single-fault record to score in {folder}: `make families` produces them")
    scores = accuracy(table)
    shown = [
        tables.Part(table=tables.family_scores(scores)),
        tables.Part("Correct per planted fault:", per_fault(table)),
    ]
    left_out = harmless(records)
    if len(left_out):
        counted = tables.harmless_cells(left_out, "model")
        shown.append(tables.Part("Left out, the fault did no measurable harm there:", counted))
    single_seeded = single_seed(table, scores)
    if single_seeded:
        shown.append(
            tables.Part(f"No rules-refit score for {', '.join(single_seeded)}: leave-one-seed-out needs two seeds.")
        )
    if kept:
        heading = "Rules the refits could not fit on a family's records kept their committed thresholds:"
        shown.append(tables.Part(heading, lines=tuple(kept_lines(kept))))
    misses = tables.family_misses(table)
    if len(misses):
        shown.append(tables.Part("Misses of the unchanged rules, by planted fault and verdict:", misses))
    return shown, scores


def printout(records: pd.DataFrame, folder: Path) -> list[str]:
    """What `python -m analysis families` prints: the report's parts as aligned text, then the accuracy lines.

    Raises NothingToFit when no ok single-fault record is left to score.
    """
    shown, scores = parts(records, folder)
    intro = (
        f"other model families ({folder}): rules: the MLP's thresholds unchanged (held out); rules-refit: refitted "
        "on the family's own records, leaving one seed out"
    )
    return [intro, *tables.as_text(shown), *accuracy_lines(scores)]
