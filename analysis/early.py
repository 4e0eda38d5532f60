"""How early can the doctor be trusted? The rules scored on the same runs as they were at each step budget.

Every cell keeps its measurements at 50, 100, 200, 400 and 600 steps (a shorter run is a prefix of a longer one
with the same seed), so any records folder gives the short runs for free. At each budget the rules use the
thresholds fitted for that budget, as the doctor does for a run of that length. A healthy run cut at a budget
where its own continuation did measurably better is scored as still_improving there (analysis/harm.py). The
report draws the summary (analysis/plots.py: plot_early).
"""

import pandas as pd

from analysis.features import at_budget, budgets_of
from analysis.harm import label_stopped_early
from analysis.rules import RULES, fitted_budgets, load_thresholds, verdicts
from analysis.score import accuracy_lines, role


def accuracy_by_budget(records: pd.DataFrame) -> pd.DataFrame:
    """Correct verdicts of the rules per step budget and dataset (ok records only), per-budget thresholds."""
    records = records[records.status == "ok"]
    fitted = fitted_budgets()
    rows = []
    for budget in budgets_of(records):
        cut = label_stopped_early(at_budget(records, budget), records)
        thresholds = load_thresholds(budget) if budget in fitted else load_thresholds()
        correct = verdicts(cut, RULES, thresholds).verdict == cut.diagnosis
        table = pd.DataFrame({"dataset": cut.dataset, "family": cut.model, "correct": correct})
        for (dataset, family), group in table.groupby(["dataset", "family"]):
            rows.append((budget, dataset, family, int(group.correct.sum()), len(group), role(dataset)))
    return pd.DataFrame(rows, columns=["steps", "dataset", "family", "correct", "total", "role"])


def lines(summary: pd.DataFrame) -> list[str]:
    """The machine-readable lines: `accuracy <dataset> rules <c>/<n> <role> family=<f> steps=<N>`."""
    return accuracy_lines(summary.assign(method="rules"))
