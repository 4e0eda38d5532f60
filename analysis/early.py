"""How early can the doctor be trusted? The fitted rules scored on runs cut short.

Reads the records of `make early` (conf/sweep/early.yaml: the default grid trained for 50 to 600 steps) and
scores the rules, with the thresholds fitted on the 600-step digits runs, at each step budget and dataset.
"""

from pathlib import Path

import pandas as pd

from analysis.rules import RULES, load_thresholds, verdicts
from analysis.score import budgets, role


def accuracy_by_budget(records: pd.DataFrame, thresholds: dict[str, float] | None = None) -> pd.DataFrame:
    """Correct verdicts of the fitted rules per step budget and dataset (ok records only)."""
    records = records[records.status == "ok"]
    correct = (
        verdicts(records, RULES, load_thresholds() if thresholds is None else thresholds).verdict == records.diagnosis
    )
    table = pd.DataFrame(
        {"steps": budgets(records), "dataset": records.dataset, "family": records.model, "correct": correct}
    )
    summary = table.groupby(["steps", "dataset", "family"]).correct.agg(["sum", "size"]).reset_index()
    summary["role"] = summary.dataset.map(role)
    return summary.rename(columns={"sum": "correct", "size": "total"})


def accuracy_lines(summary: pd.DataFrame) -> list[str]:
    """The machine-readable lines: `accuracy <dataset> rules <c>/<n> <role> family=<f> steps=<N>`."""
    return [
        f"accuracy {r.dataset} rules {r.correct}/{r.total} {r.role} family={r.family} steps={r.steps}"
        for r in summary.itertuples()
    ]


def plot(summary: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    for dataset, group in summary.groupby("dataset"):
        axis.plot(group.steps, group.correct / group.total, marker="o", label=f"{dataset} ({role(dataset)})")
    axis.set_xscale("log")
    axis.set_xticks(sorted(summary.steps.unique()), [str(s) for s in sorted(summary.steps.unique())])
    axis.minorticks_off()
    axis.set_ylim(0, 1.02)
    axis.set_xlabel("training steps the verdict rests on (log)")
    axis.set_ylabel("share of cells diagnosed correctly")
    axis.set_title("Fitted rules (thresholds from 600-step digits runs) on shorter runs")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
