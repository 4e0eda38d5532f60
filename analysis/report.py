"""The report: tables and figures of the scores, written to reports/report.md with PNGs beside it."""

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.features import FEATURES, feature_table
from analysis.fit import TUNED_DATASET, NothingToFit, is_tuned, kept_lines
from analysis.harm import harmful
from analysis.load import optional_records
from analysis.plots import pyplot
from analysis.rules import HEALTHY, RULES, diagnose, load_thresholds
from analysis.score import accuracy_lines, confusion, per_fault, role, score

plt = pyplot()


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join([frame.index.name or "", *map(str, frame.columns)]) + " |"
    rule = "|" + "---|" * (len(frame.columns) + 1)
    rows = [
        "| " + " | ".join([str(i), *map(str, row)]) + " |" for i, row in zip(frame.index, frame.to_numpy(), strict=True)
    ]
    return "\n".join([header, rule, *rows])


def plot_loss_curves(records: pd.DataFrame, dataset: str, path: Path) -> None:
    """One small panel per fault: every seed's training loss, the healthy runs in grey behind."""
    rows = records[records.dataset == dataset]
    faults = sorted(rows.fault.unique(), key=lambda f: (f != HEALTHY, f))
    columns = 5
    figure, axes = plt.subplots(
        -(-len(faults) // columns),
        columns,
        figsize=(3.2 * columns, 2.6 * -(-len(faults) // columns)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    healthy = rows[rows.fault == HEALTHY]
    for axis, fault in zip(axes.flat, faults, strict=False):
        for curve in healthy.train_loss_curve:
            axis.plot(curve, color="0.75", linewidth=0.8)
        for curve in rows[rows.fault == fault].train_loss_curve:
            axis.plot(curve, linewidth=0.8)
        axis.axhline(rows.ln_classes.iloc[0], color="black", linestyle=":", linewidth=0.8)
        axis.set_title(fault, fontsize=10)
        axis.set_yscale("log")
    for axis in axes.flat[len(faults) :]:
        axis.set_visible(False)
    for axis in axes[-1]:
        axis.set_xlabel("step")
    for axis in axes[:, 0]:
        axis.set_ylabel("training loss (log)")
    figure.suptitle(f"Training loss of every seed, {dataset} (grey: healthy runs; dotted: ln C)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_confusion(table: pd.DataFrame, title: str, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(6.5, 5.5))
    axis.imshow(table.to_numpy(), cmap="Blues")
    axis.set_xticks(range(len(table.columns)), table.columns, rotation=45, ha="right")
    axis.set_yticks(range(len(table.index)), table.index)
    for (i, j), count in np.ndenumerate(table.to_numpy()):
        if count:
            axis.text(
                j,
                i,
                str(count),
                ha="center",
                va="center",
                color="white" if count > table.to_numpy().max() / 2 else "black",
            )
    axis.set_xlabel("verdict")
    axis.set_ylabel("planted fault")
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_measurements(records: pd.DataFrame, thresholds: dict[str, float], path: Path) -> None:
    """Each rule's measurement against the planted fault, both datasets, with the fitted threshold drawn."""
    table = feature_table(records)
    faults = sorted(records.diagnosis.unique(), key=lambda f: (f != HEALTHY, f))
    columns = 4
    figure, axes = plt.subplots(-(-len(RULES) // columns), columns, figsize=(20, 4.2 * -(-len(RULES) // columns)))
    for axis, rule in zip(axes.flat, RULES, strict=False):
        tuned = records.dataset.map(is_tuned)
        for offset, (dataset, marker) in zip((-0.15, 0.15), ((TUNED_DATASET, "o"), ("other", "x")), strict=True):
            mask = tuned if dataset == TUNED_DATASET else ~tuned
            xs = [faults.index(f) + offset for f in records.diagnosis[mask]]
            axis.scatter(
                xs,
                table.loc[mask, rule.feature],
                marker=marker,
                s=14,
                label=f"{dataset} ({role(dataset)})" if dataset == TUNED_DATASET else "held-out datasets",
            )
        axis.axhline(thresholds[rule.verdict], color="red", linewidth=1, label="fitted threshold")
        if FEATURES[rule.feature].log:
            axis.set_yscale("log")
        axis.set_xticks(range(len(faults)), faults, rotation=60, ha="right", fontsize=8)
        axis.set_title(f"{rule.verdict}: {rule.feature}", fontsize=10)
        axis.set_ylabel(FEATURES[rule.feature].sentence, fontsize=7)
    for axis in axes.flat[len(RULES) :]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("Each rule's feature by planted fault (red: the threshold fitted on digits and the zoo, 600 steps)")
    figure.tight_layout(rect=(0, 0, 1, 0.98))  # leave the top strip to the title
    figure.savefig(path, dpi=80)
    plt.close(figure)


def device_section(folder: Path, out: Path) -> list[str]:
    """The device study's part of the report, or a line saying how to produce it."""
    from analysis.devices import crossover, plot, study_table

    records = optional_records(folder)
    if records is None:
        return [
            "## When does a GPU pay?",
            "",
            f"No device study records in {folder}: `make gpu-study` produces them.",
            "",
        ]
    table = study_table(records)
    plot(table, out / "device_study.png")
    cross = crossover(table)
    text = [
        "## When does a GPU pay?",
        "",
        f"The device study ({folder}): time per training step of the healthy recipe.",
    ]
    if cross is None:
        text.append(
            "No GPU figures exist yet: its CUDA cells were skipped on this machine (`make gpu-study` on a GPU machine)."
        )
    else:
        text += ["", _markdown(cross)]
    return [*text, "", "![device study](device_study.png)", ""]


def early_section(records: pd.DataFrame, out: Path) -> tuple[list[str], list[str]]:
    """How early the rules can be trusted (the report's part and its accuracy lines), from the records' snapshots."""
    from analysis.early import accuracy_by_budget, lines, plot

    summary = accuracy_by_budget(records)
    plot(summary, out / "early.png")
    table = summary.assign(score=summary.correct.astype(str) + "/" + summary.total.astype(str))
    table = table.pivot(index="steps", columns="dataset", values="score")
    text = [
        "## How early can the doctor be trusted?",
        "",
        "The same cells as they were after 50 to 600 steps (each cell keeps a snapshot of its measurements at every "
        "budget), judged with the thresholds fitted for that budget, as the doctor judges a run of that length.",
        "",
        _markdown(table),
        "",
        "![early](early.png)",
        "",
    ]
    return text, lines(summary)


def zoo_section(folder: Path) -> tuple[list[str], list[str]]:
    """The zoo (the report's part and its lines): false alarms and every fault size, leave-one-problem-out."""
    from analysis import zoo

    title = "## Runs the rules were not tuned on: the zoo"
    records = optional_records(folder)
    if records is None:
        return [title, "", f"No zoo records in {folder}: `make zoo` produces them.", ""], []
    kept: dict[str, str] = {}
    try:
        table = zoo.leave_one_problem_out(records, kept=kept)
    except NothingToFit as why:  # a slice with one problem: nothing to leave out
        return [title, "", f"No zoo scores from {folder}: {why}.", ""], []
    text = [title, "", *zoo.describe(table, records, kept), ""]
    return text, zoo.lines(table)


def pairs_section(folder: Path, out: Path, records: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """Two faults at once (the report's part and its accuracy lines), where records exist."""
    from analysis import pairs

    title = "## Two faults at once"
    records = optional_records(folder) if records is None else records
    table = pairs.outcomes(records) if records is not None else None
    if table is None or table.empty:
        return [title, "", f"No two-fault records in {folder}: `make pairs` produces them.", ""], []
    counts = pairs.summary(table)
    shown = counts.assign(
        both=counts.both.astype(str) + "/" + counts.cells.astype(str),
        share=counts.both_share.map("{:.0%}".format),
        exact=counts.no_extra.astype(str) + "/" + counts.cells.astype(str),
    ).set_index("dataset")[["family", "steps", "role", "both", "share", "one", "neither", "exact"]]
    masks = pairs.masking(table)
    text = [
        title,
        "",
        f"Two faults planted in one cell ({folder}; {table[['first', 'second']].drop_duplicates().shape[0]} pairs that "
        "set no key twice). The diagnosis is the set of verdicts whose rules fired, with the thresholds fitted on "
        "single faults; `both` counts cells where both planted faults are in it, `exact` cells where nothing else "
        "is. Goal: both named in at least 80% of the held-out cells.",
        "",
        _markdown(shown),
        "",
        "How often each fault was named when planted with another:",
        "",
        _markdown(pairs.per_fault(table).T),
        "",
    ]
    if len(masks):
        text += [
            "Pairs that mask: the hidden fault was named in none of the pair's cells.",
            "",
            _markdown(masks.set_index("hidden")),
            "",
        ]
    return text, pairs.accuracy_lines(counts)


def realbugs_section(folder: Path) -> tuple[list[str], list[str]]:
    """Real buggy programs beside the published tools: the table `make realbugs` wrote, and its lines.

    The benchmark runs the doctor (benchmarks/realbugs/, on top of the analysis): the report only reads what it
    wrote, so that nothing here imports the layer above.
    """
    title = "## Real bugs from real programs, beside the published tools"
    table = folder / "realbugs.md"
    if not table.exists():
        return [title, "", f"No real-bug results in {folder}: `make realbugs` produces them.", ""], []
    text = table.read_text()
    lines = [line for line in (folder / "realbugs.lines").read_text().splitlines() if line.startswith("realbugs ")]
    return [title, "", text, ""], lines


def families_section(folder: Path, out: Path, records: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """Other model families (the report's part and its accuracy lines), where records exist."""
    from analysis import families

    title = "## Other model families"
    records = optional_records(folder) if records is None else records
    if records is None:
        return [title, "", f"No records of other families in {folder}: `make families` produces them.", ""], []
    kept: dict[str, str] = {}
    table = families.predictions(records, kept=kept)
    summary = families.accuracy(table)
    shown = summary.assign(score=summary.correct.astype(str) + "/" + summary.total.astype(str))
    shown = shown.pivot(index=["family", "dataset", "steps"], columns="method", values="score").reset_index()
    text = [
        title,
        "",
        f"The same faults on other models ({folder}). `rules`: the thresholds fitted on the MLP's runs on digits and "
        "the zoo, unchanged (held out: these families were never seen while fitting). `rules-refit`: thresholds "
        "refitted on the family's own records, each seed scored by a fit without it. Fault cells whose fault did "
        "no measurable harm against their healthy twin are left out. Goal: held out at least 95%.",
        "",
        _markdown(shown.set_index("family")),
        "",
        "Correct per planted fault:",
        "",
        _markdown(families.per_fault(table)),
        "",
    ]
    single = records[(records.status == "ok") & (records.verdicts.str.len() == 1)]
    harmless = single[~harmful(single)]
    if len(harmless):
        counted = harmless.groupby(["model", "fault"]).size().rename("cells").reset_index().set_index("model")
        text += ["Left out, the fault did no measurable harm there:", "", _markdown(counted), ""]
    single_seed = sorted(set(table.family) - set(summary.family[summary.method == "rules-refit"]))
    if single_seed:
        text += [f"No rules-refit score for {', '.join(single_seed)}: leave-one-seed-out needs two seeds.", ""]
    if kept:
        text += ["Rules the refits could not fit on a family's records kept their committed thresholds:", ""]
        text += [*kept_lines(kept), ""]
    misses = table[table.rules != table.diagnosis]
    if len(misses):
        text += ["Misses of the unchanged rules, by planted fault and verdict:", ""]
        counted = misses.groupby(["family", "diagnosis", "rules"]).size().rename("cells").reset_index()
        text += [_markdown(counted.set_index("family")), ""]
    return text, accuracy_lines(summary)


def slice_notes(scores: dict) -> list[str]:
    """What a slice of the grid leaves out of the report: methods and figures that need records it lacks."""
    notes = []
    missing = [m for m in ("tree", "forest") if m not in scores["methods"]]
    if missing:
        notes.append(f"No {TUNED_DATASET} records here: the {' and '.join(missing)} (fitted on them) are left out")
    tuned = scores["records"][scores["records"].dataset == TUNED_DATASET]
    if len(tuned) and not scores["loso"]:
        notes.append(f"One seed of {TUNED_DATASET} only: no leave-one-seed-out score (it needs at least two seeds)")
    return notes


def build(
    records: pd.DataFrame,
    out: Path,
    devices: Path | None = None,
    zoo: Path | None = None,
    pairs: Path | None = None,
    families: Path | None = None,
    realbugs: Path | None = None,
    early: bool = True,
) -> tuple[str, list[str]]:
    """Write report.md and its PNGs into `out`; return the text printed on the terminal and the accuracy lines."""
    scores = score(records)
    ok, predictions, correct, methods = scores["records"], scores["predictions"], scores["correct"], scores["methods"]
    if ok.empty:
        failed = int((records.status != "ok").sum())
        raise NothingToFit(
            f"nothing to report: no ok record that counts ({failed} failed or skipped, "
            f"{len(scores['harmless'])} whose fault did no harm)"
        )
    out.mkdir(parents=True, exist_ok=True)
    thresholds = load_thresholds()
    zoo_text, zoo_lines = zoo_section(zoo) if zoo is not None else ([], [])
    early_text, early_lines = early_section(ok, out) if early else ([], [])
    pairs_text, pairs_lines = pairs_section(pairs, out) if pairs is not None else ([], [])
    families_text, families_lines = families_section(families, out) if families is not None else ([], [])
    realbugs_text, realbugs_lines = realbugs_section(realbugs) if realbugs is not None else ([], [])
    lines = accuracy_lines(scores["accuracy"]) + zoo_lines + early_lines + pairs_lines + families_lines
    lines += realbugs_lines
    skipped = records[records.status != "ok"]

    accuracy_table = scores["accuracy"].assign(score=lambda a: a.correct.astype(str) + "/" + a.total.astype(str))
    accuracy_table = accuracy_table.pivot(index="dataset", columns="method", values="score")[methods]
    accuracy_table.insert(0, "role", [role(d) for d in accuracy_table.index])

    text = ["# Can a short list of measurements name the fault?", ""]
    text += [
        f"Records: {len(ok)} ok cells"
        + (f" ({len(skipped)} failed or skipped cells left out)" if len(skipped) else "")
        + ".",
        f"The rules' thresholds were fitted on **{TUNED_DATASET}** and the zoo's generated problems (`make zoo`), so "
        "their scores are **in-sample**; every other dataset was never seen while fitting, so its scores are **held "
        f"out**. The tree and forest learn from the same features of this grid's {TUNED_DATASET} records.",
        "",
        "## Accuracy by dataset and method",
        "",
        _markdown(accuracy_table),
        "",
    ]
    text += [f"{note}.\n" for note in slice_notes(scores)]
    if scores["loso"]:
        loso = ", ".join(f"{m} {scores['loso'][m]}/{scores['loso_total']}" for m in methods)
        text += [f"Leave-one-seed-out on {TUNED_DATASET} (each seed scored by a fit without it): {loso}.", ""]
    if scores["kept"]:
        text += [
            "Rules the leave-one-seed-out fits could not fit on these records kept their committed thresholds:",
            "",
            *kept_lines(scores["kept"]),
            "",
        ]
    harmless = scores["harmless"]
    if len(harmless):
        counted = harmless.groupby(["dataset", "fault"]).size().rename("cells").reset_index().set_index("dataset")
        text += [
            "Left out: fault cells whose fault did no measurable harm against their healthy twin (analysis/harm.py):",
            "",
            _markdown(counted),
            "",
        ]
    for dataset in scores["datasets"]:
        text += [
            f"## {dataset} ({role(dataset)}): correct per planted fault",
            "",
            _markdown(per_fault(ok, correct, dataset)),
            "",
        ]
        table = confusion(ok, predictions["rules"], dataset)
        picture = f"confusion_{dataset}.png"
        plot_confusion(table, f"rules on {dataset} ({role(dataset)})", out / picture)
        text += [
            f"Confusion of the fitted rules on {dataset}:",
            "",
            _markdown(table),
            "",
            f"![confusion {dataset}]({picture})",
            "",
        ]
        misses = ok[(ok.dataset == dataset) & ~correct.rules]
        if len(misses):
            text += [f"Misses of the rules on {dataset}:", ""]
            for _, record in misses.iterrows():
                findings = diagnose(record, RULES, thresholds)
                fired = "; ".join(f"{f.verdict}: {f.evidence}" for f in findings)
                text.append(f"- {record.cell_id} (planted {record.diagnosis}): {fired}")
            text.append("")
        curves = f"loss_curves_{dataset}.png"
        plot_loss_curves(ok, dataset, out / curves)
        text += [f"![loss curves {dataset}]({curves})", ""]
    plot_measurements(ok, thresholds, out / "measurements.png")
    text += [
        "## The measurements behind the rules",
        "",
        _markdown(
            pd.DataFrame(
                {
                    "feature": [r.feature for r in RULES],
                    "fires when": [">" if r.above else "<" for r in RULES],
                    "threshold": [f"{thresholds[r.verdict]:.4g}" for r in RULES],
                },
                index=pd.Index([r.verdict for r in RULES], name="verdict"),
            )
        ),
        "",
        "![measurements](measurements.png)",
        "",
        *zoo_text,
        *(device_section(devices, out) if devices is not None else []),
        *early_text,
        *pairs_text,
        *families_text,
        *realbugs_text,
        "## What these scores do not cover",
        "",
        "- At most two faults at once, and only pairs that set different keys of the recipe.",
        "- Three small model families (MLP, CNN, GRU) on small problems; large models and transformers were not"
        " tested.",
        "- Faults come in three sizes at most; sizes that did no measurable harm are left out of the zoo's scores.",
        "- The generated problems are tabular; real failing runs are messier.",
        "",
        "## Machine-readable lines",
        "",
        "```",
        *lines,
        "```",
    ]
    (out / "report.md").write_text("\n".join(text) + "\n")
    terminal = [_markdown(accuracy_table), ""]
    if scores["loso"]:
        terminal.append(
            f"leave-one-seed-out on {TUNED_DATASET}: "
            + ", ".join(f"{m} {scores['loso'][m]}/{scores['loso_total']}" for m in methods)
        )
    terminal += [f"{note}" for note in slice_notes(scores)]
    terminal += [f"kept committed threshold: {verdict}: {why}" for verdict, why in scores["kept"].items()]
    terminal += [*lines, f"report: {out / 'report.md'}"]
    return "\n".join(terminal), lines
