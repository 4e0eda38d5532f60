"""Scoring: how often each method names the planted fault, per dataset, with the dataset's role stated.

Methods: `rules` (fitted thresholds from the committed file, fitted on digits and the zoo's generated
problems), `naive` (hand-set thresholds on raw readings), and two scikit-learn classifiers on the same features,
fitted on the grid's own digits records: `tree` (depth 4) and `forest`. Digits and the zoo problems score
in-sample; every other dataset is held out. Leave-one-seed-out on digits refits everything without one seed and
scores that seed: a fairer in-sample figure.
"""

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

from analysis.features import feature_table
from analysis.fit import TUNED_DATASET, NothingToFit, fit_thresholds, is_tuned
from analysis.harm import harmful
from analysis.naive_rules import NAIVE_RULES, NAIVE_THRESHOLDS
from analysis.rules import RULES, load_thresholds, verdicts

METHODS = ("rules", "naive", "tree", "forest")


def role(dataset: str) -> str:
    return "in-sample" if is_tuned(dataset) else "held-out"


def matrix(table: pd.DataFrame) -> np.ndarray:
    """A feature table as scikit-learn's classifiers take it: infinities clipped, missing values -1."""
    return np.nan_to_num(table.to_numpy(float), nan=-1.0, posinf=1e12, neginf=-1e12)


def budgets(records: pd.DataFrame) -> pd.Series:
    """The number of training steps of each record, from its recipe."""
    return pd.Series([int(OmegaConf.create(text).loop.steps) for text in records.config_yaml], index=records.index)


def _joined(values: pd.Series) -> str:
    return ",".join(str(v) for v in sorted(values.unique()))


CLASSIFIERS = {
    "tree": lambda: DecisionTreeClassifier(max_depth=4, random_state=0),
    "forest": lambda: RandomForestClassifier(n_estimators=200, random_state=0),
}


def classifier(method: str):
    """The unfitted scikit-learn classifier of a method: a depth-4 tree or a 200-tree forest."""
    make = CLASSIFIERS.get(method)
    if make is None:
        raise ValueError(f"unknown classifier {method!r}: the choices are {', '.join(CLASSIFIERS)}")
    return make()


def predict(
    records: pd.DataFrame, method: str, tuned: pd.DataFrame, thresholds: dict[str, float] | None = None
) -> pd.Series:
    """The verdict of `method` for each record; `tuned` is what the fitted methods learn from."""
    if method == "rules":
        return verdicts(records, RULES, load_thresholds() if thresholds is None else thresholds).verdict
    if method == "naive":
        return verdicts(records, NAIVE_RULES, NAIVE_THRESHOLDS, facts=[]).verdict  # the first version had no facts
    model = classifier(method).fit(matrix(feature_table(tuned)), tuned.diagnosis)
    return pd.Series(model.predict(matrix(feature_table(records))), index=records.index)


def leave_one_seed_out(
    tuned: pd.DataFrame, method: str, fallback: dict[str, float] | None = None, kept: dict[str, str] | None = None
) -> pd.Series:
    """Verdicts on the tuned records, each seed predicted by a method fitted without it (at least two seeds).

    `fallback`: thresholds kept by rules that cannot be fitted on the other seeds (None: the committed ones; see
    `fit_thresholds`); `kept`, if given, receives those rules and why.
    """
    if tuned.seed.nunique() < 2:
        raise NothingToFit("leave-one-seed-out needs records of at least two seeds")
    fallback = load_thresholds() if fallback is None else fallback
    parts = []
    for seed in sorted(tuned.seed.unique()):
        held, rest = tuned[tuned.seed == seed], tuned[tuned.seed != seed]
        thresholds = None
        if method == "rules":
            fit = fit_thresholds(rest, fallback=fallback)
            thresholds = fit.thresholds
            if kept is not None:
                kept.update(fit.kept)  # a later seed's reason replaces an earlier one's
        parts.append(predict(held, method, rest, thresholds))
    return pd.concat(parts).reindex(tuned.index)


def score(records: pd.DataFrame) -> dict:
    """Every prediction and table the report shows, from ok records whose fault did harm (analysis/harm.py).

    Only records with one fault planted (healthy included) are scored here: a cell with two has no single right
    verdict, and analysis/pairs.py scores it. Those are counted under "pairs".
    """
    records = records[records.status == "ok"]
    planted = records.verdicts.str.len()
    pairs, records = records[planted > 1], records[planted == 1]
    hurt = harmful(records)
    harmless = records[~hurt]
    records = records[hurt]
    tuned = records[records.dataset == TUNED_DATASET]
    # The tree and the forest learn from this grid's digits records: a slice without them has no tree or forest.
    methods = [m for m in METHODS if len(tuned) or m in ("rules", "naive")]
    predictions = pd.DataFrame({m: predict(records, m, tuned) for m in methods}, index=records.index)
    correct = predictions.eq(records.diagnosis, axis=0)
    datasets = sorted(records.dataset.unique(), key=lambda d: (d != TUNED_DATASET, d))
    steps = budgets(records)
    accuracy = [
        {
            "dataset": d,
            "method": m,
            "correct": int(correct.loc[records.dataset == d, m].sum()),
            "total": int((records.dataset == d).sum()),
            "role": role(d),
            "family": _joined(records.model[records.dataset == d]),
            "steps": _joined(steps[records.dataset == d]),
        }
        for d in datasets
        for m in methods
    ]
    kept: dict[str, str] = {}  # rules that kept their committed threshold in the leave-one-seed-out fits, and why
    loso = (
        {m: int(leave_one_seed_out(tuned, m, kept=kept).eq(tuned.diagnosis).sum()) for m in methods}
        if tuned.seed.nunique() > 1
        else {}
    )
    return {
        "methods": methods,
        "kept": kept,
        "records": records,
        "predictions": predictions,
        "correct": correct,
        "datasets": datasets,
        "accuracy": pd.DataFrame(accuracy),
        "loso": loso,
        "loso_total": len(tuned),
        "harmless": harmless,
        "pairs": pairs,
    }


def accuracy_line(dataset, method, correct, total, role, family, steps, *more: str) -> str:
    """The line for scripts every score prints: `accuracy <dataset> <method> <c>/<n> <role> family=<f> steps=<N>`.

    `more` are further `key=value` words (the zoo's severity, the pairs' fault count), appended in order.
    """
    words = [f"accuracy {dataset} {method} {correct}/{total} {role} family={family} steps={steps}", *more]
    return " ".join(words)


def accuracy_lines(accuracy: pd.DataFrame) -> list[str]:
    """One `accuracy_line` per row of a table with dataset, method, correct, total, role, family and steps."""
    return [
        accuracy_line(r.dataset, r.method, r.correct, r.total, r.role, r.family, r.steps) for r in accuracy.itertuples()
    ]


def per_fault(records: pd.DataFrame, correct: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Correct / cells per fault (rows) and method (columns) on one dataset, as 'x/n' strings."""
    mask = records.dataset == dataset
    groups = correct[mask].groupby(records.diagnosis[mask])
    hits, counts = groups.sum(), groups.size()
    return hits.apply(lambda column: column.astype(int).astype(str) + "/" + counts.astype(str))


def confusion(records: pd.DataFrame, predicted: pd.Series, dataset: str) -> pd.DataFrame:
    """Counts of planted fault (rows) against verdict (columns) on one dataset."""
    mask = records.dataset == dataset
    labels = sorted(set(records.diagnosis[mask]) | set(predicted[mask]))
    table = pd.crosstab(records.diagnosis[mask], predicted[mask]).reindex(index=labels, columns=labels, fill_value=0)
    table.index.name, table.columns.name = "planted", "verdict"
    return table
