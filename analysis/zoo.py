"""The zoo: the rules on problems, optimizers, loops and fault sizes they were not fitted on.

Reads the records of `make zoo` (conf/sweep/zoo_healthy.yaml and zoo_faults.yaml: digits and 12 generated
problems, healthy runs under 15 recipes, every fault at every size). Every problem is predicted by rules
fitted without it (leave-one-problem-out), at every step budget, and so is the forest on the same features.
Fault cells whose fault did no measurable harm against their healthy twin are left out (analysis/harm.py) and
counted. The scores:
- `false-alarms <dataset> <c>/<n> steps=<N>`: healthy runs called anything but healthy;
- `false-alarms-finished <dataset> <c>/<n> steps=<N>`: the same among the healthy runs that had finished
  learning at that budget (their own continuation reached no measurably better validation score: the convention
  `make fit` and `make early` label by, analysis/harm.py `label_stopped_early`); a run cut while it was still
  improving and called `still_improving` is right by that convention and a false alarm by the strict count;
- `accuracy <dataset> <method> <c>/<n> leave-one-problem-out family=<f> steps=<N> severity=<s>`: fault cells
  (and healthy ones, severity=none) named right.
"""

import pandas as pd
from sklearn.ensemble import RandomForestClassifier

from analysis.features import at_budget, budgets_of, feature_table
from analysis.fit import NothingToFit, fit_budgets, is_tuned, kept_lines
from analysis.harm import STILL_IMPROVING, harm_table, harmful, label_stopped_early
from analysis.rules import HEALTHY, verdicts
from analysis.score import accuracy_line, classifier, matrix
from analysis.tables import Part, as_markdown, as_text

METHODS = ("rules", "forest")
ROLE = "leave-one-problem-out"


def _forest(train: pd.DataFrame, table: pd.DataFrame) -> RandomForestClassifier:
    return classifier("forest").fit(matrix(table), train.diagnosis)


def leave_one_problem_out(records: pd.DataFrame, kept: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per (record, budget): the planted verdict, its severity and each method's verdict.

    Each tuned problem's records are predicted by rules (and a forest) fitted on the other tuned problems; a rule
    those cannot fit keeps a fallback threshold (see analysis.fit), and `kept`, if given, receives why.
    """
    records = records[(records.status == "ok") & records.dataset.map(is_tuned)]
    harm = harm_table(records)
    problems = sorted(records.dataset.unique())
    if len(problems) < 2:
        found = f"{len(problems)}: {', '.join(problems)}" if problems else "none"
        raise NothingToFit(
            "leave-one-problem-out needs ok records of at least two tuned problems (digits and the zoo's); "
            f"these have {found}"
        )
    budgets = budgets_of(records)
    cut = {b: at_budget(records, b) for b in budgets}
    tables = {b: feature_table(cut[b]) for b in budgets}
    rows = []
    for problem in problems:
        rest = records[records.dataset != problem]
        fits = fit_budgets(rest, harm=harm.loc[rest.index])
        for budget_reasons in fits.kept.values():  # the longest budget first: its reason is the one shown
            for verdict, why in budget_reasons.items():
                if kept is not None:
                    kept.setdefault(verdict, f"{why} (leaving out {problem})")
        for budget in budgets:
            here, table = cut[budget], tables[budget]
            mine = here.dataset == problem
            fitted = fits.thresholds.get(budget) or fits.thresholds[max(fits.thresholds)]
            named = verdicts(here[mine], thresholds=fitted, table=table[mine]).verdict
            relabeled = label_stopped_early(here[mine], records).diagnosis
            train = ~mine & harm.harmful.reindex(here.index).to_numpy()
            forest = _forest(here[train], table[train])
            rows.append(
                pd.DataFrame(
                    {
                        "dataset": here.dataset[mine],
                        "family": here.model[mine],
                        "steps": budget,
                        "fault": here.fault[mine],
                        "severity": here.severity[mine],
                        "diagnosis": here.diagnosis[mine],
                        "harmful": harm.harmful.reindex(here.index[mine]),
                        # healthy, cut at this budget while still improving: its continuation did measurably better
                        "improving": (here.diagnosis[mine] == HEALTHY) & (relabeled == STILL_IMPROVING),
                        "rules": named,
                        "forest": forest.predict(matrix(table[mine])),
                    }
                )
            )
    return pd.concat(rows)


def harm_aware_correct(group: pd.DataFrame, method: str) -> pd.Series:
    """Right under harm-aware scoring: a fault that did harm named; one that did none named or called healthy."""
    named = group[method] == group.diagnosis
    return named | (~group.harmful.astype(bool) & (group[method] == HEALTHY))


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Correct verdicts per dataset, budget, severity and method; severity 'none' rows are the healthy runs.

    `correct`/`total` count healthy runs and the fault cells that did harm (the harmless ones left out);
    `aware`/`cells` count every cell, a harmless fault's right when named or called healthy.
    """
    rows = []
    for (dataset, family, steps, severity), group in table.groupby(["dataset", "family", "steps", "severity"]):
        hurt = group[group.harmful.astype(bool)]
        for method in METHODS:
            correct = int((hurt[method] == hurt.diagnosis).sum())
            aware = int(harm_aware_correct(group, method).sum())
            rows.append((dataset, family, steps, severity, method, correct, len(hurt), aware, len(group)))
    columns = ["dataset", "family", "steps", "severity", "method", "correct", "total", "aware", "cells"]
    return pd.DataFrame(rows, columns=columns)


def lines(table: pd.DataFrame) -> list[str]:
    """The machine-readable lines: false alarms, accuracy and harm-aware accuracy per dataset, budget, severity.

    Accuracy leaves harmless fault cells out; harm-aware counts every fault cell, a harmless one right when named
    or called healthy. A healthy run with warnings only is called healthy: it counts as no false alarm.
    """
    out = []
    healthy = table[table.diagnosis == HEALTHY]
    for (dataset, steps), group in healthy.groupby(["dataset", "steps"]):
        out.append(f"false-alarms {dataset} {int((group.rules != HEALTHY).sum())}/{len(group)} steps={steps}")
        done = group[~group.improving.astype(bool)]
        out.append(f"false-alarms-finished {dataset} {int((done.rules != HEALTHY).sum())}/{len(done)} steps={steps}")
    for r in summary(table).itertuples():
        severity = f"severity={r.severity}"
        out.append(accuracy_line(r.dataset, r.method, r.correct, r.total, ROLE, r.family, r.steps, severity))
        if r.severity != "none":
            line = accuracy_line(r.dataset, r.method, r.aware, r.cells, ROLE, r.family, r.steps, severity)
            out.append(line.replace("accuracy ", "accuracy-harm-aware ", 1))
    return out


def harmless_counts(records: pd.DataFrame) -> pd.DataFrame:
    """Per fault and severity: fault cells on the tuned problems, and how many did no measurable harm."""
    records = records[(records.status == "ok") & records.dataset.map(is_tuned)]
    hurt = harmful(records)  # on every record: a fault cell is judged against its healthy twin, kept here
    faults = records.diagnosis != HEALTHY
    table = pd.DataFrame({"fault": records.fault, "severity": records.severity, "harmless": ~hurt})[faults]
    counted = table.groupby(["fault", "severity"]).harmless.agg(["size", "sum"])
    return counted.rename(columns={"size": "cells", "sum": "harmless"}).reset_index()


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.1%})" if total else "0/0"


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """Per budget and method: false alarms on healthy runs, faults named per severity, harm-aware when planted.

    False alarms are counted on every healthy run, and on those that had finished learning at the budget. Each
    severity leaves harmless fault cells out; harm-aware counts every cell, a harmless fault right when named or
    called healthy.
    """
    rows = []
    for steps, group in table.groupby("steps"):
        for method in METHODS:
            healthy = group[group.diagnosis == HEALTHY]
            row = {"steps": steps, "method": method}
            row["false alarms"] = _share(int((healthy[method] != HEALTHY).sum()), len(healthy))
            done = healthy[~healthy.improving.astype(bool)]
            row["false alarms, finished runs"] = _share(int((done[method] != HEALTHY).sum()), len(done))
            hurt = group[group.harmful.astype(bool)]
            for severity in ("mild", "planted", "extreme"):
                faults = hurt[hurt.severity == severity]
                row[severity] = _share(int((faults[method] == faults.diagnosis).sum()), len(faults))
            planted = group[group.severity == "planted"]
            row["planted, harm-aware"] = _share(int(harm_aware_correct(planted, method).sum()), len(planted))
            rows.append(row)
    return pd.DataFrame(rows).set_index(["steps", "method"])


def parts(table: pd.DataFrame, records: pd.DataFrame, kept: dict[str, str] | None = None) -> list[Part]:
    """What the report's zoo section and `python -m analysis zoo` both show.

    That is the headline table, per-fault scores, the misses, the harmless sizes, and the rules some fold could not
    fit. `table` is `leave_one_problem_out`'s; `kept`: rules that some fold could not fit, with why (from it too).
    """
    longest = table.steps.max()
    last = table[(table.steps == longest) & table.harmful.astype(bool)]
    faults = last[last.diagnosis != HEALTHY]
    hits = (faults.rules == faults.diagnosis).groupby([faults.diagnosis, faults.severity])
    per_fault = (hits.sum().astype(str) + "/" + hits.size().astype(str)).unstack(fill_value="")
    per_fault = per_fault.reindex(columns=[c for c in ("mild", "planted", "extreme") if c in per_fault.columns])
    misses = last[last.rules != last.diagnosis]
    counted = misses.groupby(["diagnosis", "severity", "rules"]).size().rename("cells").reset_index()
    harmless = harmless_counts(records)
    harmless = harmless[harmless.harmless > 0]
    shown = [
        Part(table=headline(table).reset_index().set_index("steps")),
        Part(f"Per fault and size at {longest} steps (rules):", per_fault.rename_axis("planted")),
    ]
    if len(counted):
        heading = f"Misses at {longest} steps (rules), by planted verdict and verdict given:"
        shown.append(Part(heading, counted.set_index("diagnosis")))
    if len(harmless):
        heading = "Fault cells left out because the fault did no measurable harm (analysis/harm.py):"
        shown.append(Part(heading, harmless.set_index("fault")))
    if kept:
        heading = "Rules some fold could not fit kept a threshold they were not fitted on there:"
        shown.append(Part(heading, lines=tuple(kept_lines(kept))))
    return shown


def describe(table: pd.DataFrame, records: pd.DataFrame, kept: dict[str, str] | None = None) -> list[str]:
    """The zoo's part of the report, in markdown: what was run and how it is judged, then `parts`."""
    problems = sorted(table.dataset.unique())
    intro = (
        f"Digits and {len(problems) - 1} generated problems, healthy runs under the recipes of "
        "conf/sweep/zoo_healthy.yaml and every fault at every size (`make zoo`). Each problem is judged by rules "
        "fitted without it (leave-one-problem-out), at each step budget with that budget's thresholds; the forest "
        "is fitted the same way on the same features. Fault cells whose fault did no measurable harm against their "
        "healthy twin are left out (below)."
    )
    return [intro, "", *as_markdown(parts(table, records, kept))]


def printout(table: pd.DataFrame, records: pd.DataFrame, kept: dict[str, str] | None = None) -> list[str]:
    """What `python -m analysis zoo` prints: the report's parts as aligned text, then the score lines."""
    problems = sorted(table.dataset.unique())
    intro = (
        f"the zoo: digits and {len(problems) - 1} generated problems, each judged by rules and a forest fitted "
        "without it (leave-one-problem-out), at each step budget"
    )
    return [intro, *as_text(parts(table, records, kept)), *lines(table)]
