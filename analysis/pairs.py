"""Two faults at once: is each of them named by the set of verdicts whose rules fired.

Reads the records of `make pairs` (conf/sweep/pairs.yaml: two faults planted per cell). The planted set is a
cell's `verdicts`; the named set is every verdict whose rule fired, with the thresholds fitted on
single faults. Each cell is `both` (both planted faults named), `one` or `neither`; `extra` counts verdicts
named that were not planted. A fault masks another when, planted together, the other is named in no cell.
`parts` builds what both `python -m analysis pairs` (`printout`) and the report's section (analysis/sections.py's
pairs_section) show.
"""

from pathlib import Path

import pandas as pd

from analysis import tables
from analysis.fit import NothingToFit
from analysis.rules import load_thresholds, verdicts
from analysis.score import accuracy_line, budgets, role

OUTCOMES = ("both", "one", "neither")


def outcomes(records: pd.DataFrame, thresholds: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per ok two-fault record: what was planted, what was named, and the outcome."""
    records = records[(records.status == "ok") & (records.verdicts.str.len() == 2)]
    judged = verdicts(records, thresholds=load_thresholds() if thresholds is None else thresholds)
    # Every rule that fired counts, warnings too: with two faults planted, the first can hide the outcome's cost
    # of the second, and a warning still names it.
    fired = [failing + warned for failing, warned in zip(judged.fired, judged.warnings, strict=True)]
    planted = records.verdicts
    first_named = [p[0] in f for p, f in zip(planted, fired, strict=True)]
    second_named = [p[1] in f for p, f in zip(planted, fired, strict=True)]
    table = pd.DataFrame(
        {
            "cell_id": records.cell_id,
            "dataset": records.dataset,
            "family": records.model,
            "seed": records.seed,
            "steps": budgets(records),
            "first": planted.str[0],
            "second": planted.str[1],
            "named": fired,
            "first_named": first_named,
            "second_named": second_named,
            "extra": [len(set(f) - set(p)) for p, f in zip(planted, fired, strict=True)],
        },
        index=records.index,
    )
    hits = table.first_named.astype(int) + table.second_named.astype(int)
    table["outcome"] = hits.map({2: "both", 1: "one", 0: "neither"})
    return table


def pair_count(table: pd.DataFrame) -> int:
    """How many distinct pairs of faults the outcomes table holds."""
    return table[["first", "second"]].drop_duplicates().shape[0]


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Cells per outcome for each dataset and family, with the share where both faults were named."""
    counts = table.groupby(["dataset", "family", "steps"]).outcome.value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=list(OUTCOMES), fill_value=0)
    counts["cells"] = counts.sum(axis=1)
    counts["both_share"] = counts.both / counts.cells
    counts["no_extra"] = table.groupby(["dataset", "family", "steps"]).extra.apply(lambda e: int((e == 0).sum()))
    counts["role"] = [role(d) for d, _, _ in counts.index]
    return counts.reset_index()


def masking(table: pd.DataFrame) -> pd.DataFrame:
    """Pairs in which one fault was never named in any of its cells: which fault hides, behind which."""
    rows = []
    for (first, second), cells in table.groupby(["first", "second"]):
        for hidden, shown, named in ((first, second, cells.first_named), (second, first, cells.second_named)):
            if not named.any():
                rows.append({"hidden": hidden, "behind": shown, "cells": len(cells), "named instead": _common(cells)})
    return pd.DataFrame(rows, columns=["hidden", "behind", "cells", "named instead"])


def _common(cells: pd.DataFrame) -> str:
    verdicts_named = pd.Series([v for named in cells.named for v in named])
    return ", ".join(verdicts_named.value_counts().index[:3]) if len(verdicts_named) else "nothing"


def per_fault(table: pd.DataFrame) -> pd.DataFrame:
    """For each fault: in how many of its pair cells it was named."""
    rows = pd.concat(
        [
            table[["first", "first_named"]].set_axis(["fault", "named"], axis=1),
            table[["second", "second_named"]].set_axis(["fault", "named"], axis=1),
        ]
    )
    grouped = rows.groupby("fault").named.agg(["sum", "size"])
    return pd.DataFrame({"named": grouped["sum"].astype(str) + "/" + grouped["size"].astype(str)}).rename_axis("fault")


def accuracy_lines(counts: pd.DataFrame) -> list[str]:
    """`accuracy <dataset> rules-both-named <c>/<n> <role> family=<f> steps=<N> faults=2`."""
    return [
        accuracy_line(r.dataset, "rules-both-named", r.both, r.cells, r.role, r.family, r.steps, "faults=2")
        for r in counts.itertuples()
    ]


def parts(records: pd.DataFrame, folder: Path) -> tuple[list[tables.Part], pd.DataFrame, pd.DataFrame]:
    """What the report's section and the `pairs` command both show, with the outcomes and the counts behind them.

    Raises NothingToFit when the records hold no ok two-fault cell.
    """
    table = outcomes(records)
    if table.empty:
        raise NothingToFit(f"no two-fault records in {folder}: `make pairs` produces them")
    counts = summary(table)
    shown = [
        tables.Part(table=tables.pair_outcomes(counts)),
        tables.Part("How often each fault was named when planted with another:", per_fault(table)),
    ]
    masks = masking(table)
    if len(masks):
        heading = "Pairs that mask: the hidden fault was named in none of the pair's cells."
        shown.append(tables.Part(heading, tables.pair_masking(masks)))
    return shown, table, counts


def printout(records: pd.DataFrame, folder: Path) -> list[str]:
    """What `python -m analysis pairs` prints: the report's parts as aligned text, then the accuracy lines.

    Raises NothingToFit when the records hold no ok two-fault cell.
    """
    shown, table, counts = parts(records, folder)
    intro = (
        f"two faults at once ({folder}): {pair_count(table)} pairs, {len(table)} cells; both: both planted faults "
        "named, exact: nothing else named"
    )
    return [intro, *tables.as_text(shown), *accuracy_lines(counts)]
