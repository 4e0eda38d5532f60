"""The report's tables: markdown rendering, and the frames its sections show.

Each function here shapes a study's scores into the frame a reader sees (scores as `c/n`, one row per dataset,
family or fault). A study that both the report and a command show (the zoo, pairs, families) builds its output
once, as a list of `Part`s; the report renders them with `as_markdown`, the `zoo`, `pairs` and `families`
commands with `as_text` (aligned text, `DataFrame.to_string`), so that the terminal and the report cannot disagree.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.rules import RULES
from analysis.score import role


def markdown(frame: pd.DataFrame) -> str:
    """A frame as a markdown table, its index the first column (headed by the index's name, or nothing)."""
    header = "| " + " | ".join([frame.index.name or "", *map(str, frame.columns)]) + " |"
    rule = "|" + "---|" * (len(frame.columns) + 1)
    rows = [
        "| " + " | ".join([str(i), *map(str, row)]) + " |" for i, row in zip(frame.index, frame.to_numpy(), strict=True)
    ]
    return "\n".join([header, rule, *rows])


@dataclass(frozen=True)
class Part:
    """One piece of a study's output: a sentence (none for the study's first table), then a table or lines."""

    heading: str | None = None
    table: pd.DataFrame | None = None
    lines: tuple[str, ...] = ()


def as_markdown(parts: Sequence[Part]) -> list[str]:
    """The parts as markdown lines: each heading, table and block of lines followed by a blank line."""
    text = []
    for part in parts:
        text += [part.heading, ""] if part.heading else []
        text += [markdown(part.table), ""] if part.table is not None else []
        text += [*part.lines, ""] if part.lines else []
    return text


def as_text(parts: Sequence[Part]) -> list[str]:
    """The parts as plain lines for a terminal: each heading over its aligned table or lines, then a blank line."""
    text = []
    for part in parts:
        text += [part.heading] if part.heading else []
        # allow_duplicates: the zoo's per-fault table is indexed by "planted" and has a severity column of that name
        table = part.table.reset_index(allow_duplicates=True) if part.table is not None else None
        text += [table.to_string(index=False)] if table is not None else []
        text += [*part.lines, ""]
    return text


def _scores(frame: pd.DataFrame) -> pd.Series:
    return frame.correct.astype(str) + "/" + frame.total.astype(str)


def scores_by_dataset(accuracy: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Correct/total per dataset (rows, with its role) and method (columns, in `methods`' order)."""
    table = accuracy.assign(score=_scores).pivot(index="dataset", columns="method", values="score")[methods]
    table.insert(0, "role", [role(d) for d in table.index])
    return table


def harmless_cells(harmless: pd.DataFrame, by: str) -> pd.DataFrame:
    """Cells whose fault did no measurable harm, counted per `by` (dataset or model) and fault."""
    return harmless.groupby([by, "fault"]).size().rename("cells").reset_index().set_index(by)


def rule_thresholds(thresholds: dict[str, float]) -> pd.DataFrame:
    """One row per rule: the feature it reads, which way it fires, and its threshold (4 significant digits)."""
    return pd.DataFrame(
        {
            "feature": [r.feature for r in RULES],
            "fires when": [">" if r.above else "<" for r in RULES],
            "threshold": [f"{thresholds[r.verdict]:.4g}" for r in RULES],
        },
        index=pd.Index([r.verdict for r in RULES], name="verdict"),
    )


def early_scores(summary: pd.DataFrame) -> pd.DataFrame:
    """Correct/total per step budget (rows) and dataset (columns), from analysis/early.py's summary."""
    return summary.assign(score=_scores).pivot(index="steps", columns="dataset", values="score")


def pair_outcomes(counts: pd.DataFrame) -> pd.DataFrame:
    """Per dataset (from analysis/pairs.py's summary): cells where both, one or neither planted fault was named."""
    shown = counts.assign(
        both=counts.both.astype(str) + "/" + counts.cells.astype(str),
        share=counts.both_share.map("{:.0%}".format),
        exact=counts.no_extra.astype(str) + "/" + counts.cells.astype(str),
    )
    return shown.set_index("dataset")[["family", "steps", "role", "both", "share", "one", "neither", "exact"]]


def pair_masking(masks: pd.DataFrame) -> pd.DataFrame:
    """analysis/pairs.py's masking, indexed by the hidden fault."""
    return masks.set_index("hidden")


def family_scores(summary: pd.DataFrame) -> pd.DataFrame:
    """Correct/total per family, dataset and steps (rows) and method (columns), from analysis/families.py."""
    shown = summary.assign(score=_scores)
    shown = shown.pivot(index=["family", "dataset", "steps"], columns="method", values="score").reset_index()
    return shown.set_index("family").fillna("-")  # "-": a method with no score there (no refit on one seed)


def family_misses(table: pd.DataFrame) -> pd.DataFrame:
    """Cells the unchanged rules got wrong, counted per family, planted verdict and verdict given."""
    misses = table[table.rules != table.diagnosis]
    return misses.groupby(["family", "diagnosis", "rules"]).size().rename("cells").reset_index().set_index("family")
