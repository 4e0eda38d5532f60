"""The study behind the data gain: does the forecast tell overfitting from healthy runs better than the gap alone.

`python -m analysis data-curve` prints it: the forecast data gain (analysis/data_forecast.py, read as `data_gain`)
by kind of run, and each way an overfitting check could read the run, scored leave-one-problem-out on the tuned
problems. It reads feature tables (analysis/features.py), which read the forecast: kept apart from the forecast,
so that the dependency goes one way.
"""

import numpy as np

from analysis.features import feature_table

GAP_BEYOND_NOISE = 2.0  # standard errors of the two accuracies: a smaller train-validation gap is sampling error


def _gap_z(table, records):
    """The train-validation gap in standard errors of the two accuracies (on the references' example counts)."""
    train, val = records.final_train_acc, records.final_val_acc
    spread = (train * (1 - train)).clip(lower=1e-4) / records.reference_examples.clip(lower=1) + (val * (1 - val)).clip(
        lower=1e-4
    ) / records.reference_val_examples.clip(lower=1)
    return table.train_val_gap / np.sqrt(spread)


def candidates(table, records) -> dict[str, tuple]:
    """Ways an overfitting check could read the run: name -> (features, each fires above its cut)."""
    gated = table.data_gain.where(_gap_z(table, records) > GAP_BEYOND_NOISE, 0.0).where(table.train_val_gap.notna())
    return {
        "the train-validation gap alone (the rule's feature, read here without the outcome gate)": (
            table.train_val_gap,
        ),
        "the forecast data gain alone": (table.data_gain,),
        "the data gain where the gap is beyond 2 standard errors": (gated,),
        "the gap and the data gain, each above its own cut": (table.train_val_gap, table.data_gain),
    }


def _fit_cuts(features, positive, grid: int = 100) -> tuple[float, ...]:
    """The cuts (one per feature, each fires above) that misclassify the fewest records; quantiles tried."""
    import itertools

    values = [f.fillna(-np.inf).to_numpy(float) for f in features]
    options = [np.unique(np.quantile(v[np.isfinite(v)], np.linspace(0, 1, grid))) for v in values]
    y = positive.to_numpy(bool)
    best = None
    for cuts in itertools.product(*options):
        fires = np.logical_and.reduce([v > c for v, c in zip(values, cuts, strict=True)])
        errors = int((fires != y).sum())
        if best is None or errors < best[0]:
            best = (errors, cuts)
    return best[1]


def study(records) -> "pd.DataFrame":  # noqa: F821 - pandas is imported where the study runs
    """Each candidate, leave-one-problem-out on the tuned problems: false alarms on healthy runs, overfitting named.

    The records at the runs' end (the longest budget); positives are the planted overfitting cells of every size,
    negatives the healthy runs (the oddity controls included); each problem is judged with cuts fitted on the others.
    """
    import pandas as pd

    records = records[
        (records.status == "ok") & (records.fault.str.contains("overfitting") | (records.diagnosis == "healthy"))
    ]
    table = feature_table(records)
    positive = records.diagnosis.eq("overfitting") | records.fault.str.contains("overfitting")
    rows = []
    for name, features in candidates(table, records).items():
        alarms = named = 0
        for problem in sorted(records.dataset.unique()):
            rest, mine = records.dataset != problem, records.dataset == problem
            cuts = _fit_cuts([f[rest] for f in features], positive[rest])
            fires = np.logical_and.reduce([f[mine].fillna(-np.inf) > c for f, c in zip(features, cuts, strict=True)])
            alarms += int((fires & ~positive[mine]).sum())
            named += int((fires & positive[mine]).sum())
        rows.append(
            {
                "reads": name,
                "false alarms": f"{alarms}/{int((~positive).sum())}",
                "overfitting named": f"{named}/{int(positive.sum())}",
                "errors": alarms + int(positive.sum()) - named,
            }
        )
    return pd.DataFrame(rows)


def printout(records) -> list[str]:
    """The data gain by kind of run and the candidates' scores: `python -m analysis data-curve`."""
    ok = records[records.status == "ok"]
    table = feature_table(ok)
    kind = ok.fault.where(ok.fault.str.contains("overfitting"), ok.diagnosis.where(ok.diagnosis == "healthy", "other"))
    spread = table.data_gain.groupby(kind).describe(percentiles=[0.5, 0.9])[["count", "50%", "90%", "max"]]
    return [
        "forecast data gain (skill at twice the examples, as a share of the room above the baseline) by kind of run:",
        spread.round(3).to_string(),
        "",
        "overfitting checks, leave-one-problem-out at the longest budget:",
        study(records).to_string(index=False),
    ]
