"""The report's sections: one function per section of reports/report.md, each returning its markdown lines.

A section that scores a study returns its machine-readable lines beside its text (the report gathers them at its
end); a section with a figure draws it into the report's folder (analysis/plots.py). A study whose records are
absent gets a line saying which command produces them. The order of the sections is analysis/report.py's.
"""

from pathlib import Path

import pandas as pd

from analysis import plots, tables
from analysis.fit import TUNED_DATASET, NothingToFit, kept_lines
from analysis.load import optional_records
from analysis.rules import RULES, diagnose
from analysis.score import accuracy_lines, confusion, per_fault, role


def slice_notes(scores: dict) -> list[str]:
    """What a slice of the grid leaves out of the report: methods and figures that need records it lacks."""
    notes = []
    missing = [m for m in ("tree", "forest") if m not in scores["methods"]]
    if missing:
        notes.append(f"No {TUNED_DATASET} records here: the {' and '.join(missing)} (fitted on them) are left out")
    tuned = scores["records"][scores["records"].dataset == TUNED_DATASET]
    if len(tuned) and not scores["loso"]:
        notes.append(f"One seed of {TUNED_DATASET} only: no leave-one-seed-out score (it needs at least two seeds)")
    if len(scores["pairs"]):
        notes.append(
            f"{len(scores['pairs'])} records with two faults planted left out: `python -m analysis pairs` scores them"
        )
    return notes


def loso_scores(scores: dict) -> str:
    """The leave-one-seed-out scores on the tuned dataset, per method: `rules 9/10, naive 8/10, ...`."""
    return ", ".join(f"{m} {scores['loso'][m]}/{scores['loso_total']}" for m in scores["methods"])


def title_section(records: pd.DataFrame, scores: dict) -> list[str]:
    """The title, how many records, and which scores are in-sample and which held out."""
    skipped = records[records.status != "ok"]
    return [
        "# Can a short list of measurements name the fault?",
        "",
        f"Records: {len(scores['records'])} ok cells"
        + (f" ({len(skipped)} failed or skipped cells left out)" if len(skipped) else "")
        + ".",
        f"The rules' thresholds were fitted on **{TUNED_DATASET}** and the zoo's generated problems (`make zoo`), so "
        "their scores are **in-sample**; every other dataset was never seen while fitting, so its scores are **held "
        f"out**. The tree and forest learn from the same features of this grid's {TUNED_DATASET} records.",
        "",
    ]


def accuracy_section(scores: dict) -> list[str]:
    """Accuracy per dataset and method, what the slice leaves out, leave-one-seed-out, and the harmless cells."""
    text = [
        "## Accuracy by dataset and method",
        "",
        tables.markdown(tables.scores_by_dataset(scores["accuracy"], scores["methods"])),
        "",
    ]
    text += [f"{note}.\n" for note in slice_notes(scores)]
    if scores["loso"]:
        text += [
            f"Leave-one-seed-out on {TUNED_DATASET} (each seed scored by a fit without it): {loso_scores(scores)}.",
            "",
        ]
    if scores["kept"]:
        text += [
            "Rules the leave-one-seed-out fits could not fit on these records kept their committed thresholds:",
            "",
            *kept_lines(scores["kept"]),
            "",
        ]
    if len(scores["harmless"]):
        text += [
            "Left out: fault cells whose fault did no measurable harm against their healthy twin (analysis/harm.py):",
            "",
            tables.markdown(tables.harmless_cells(scores["harmless"], "dataset")),
            "",
        ]
    return text


def dataset_section(scores: dict, dataset: str, thresholds: dict[str, float], out: Path) -> list[str]:
    """One dataset: correct per planted fault, the rules' confusion (table and figure), their misses, the losses."""
    ok, correct = scores["records"], scores["correct"]
    table = confusion(ok, scores["predictions"]["rules"], dataset)
    picture = f"confusion_{dataset}.png"
    plots.plot_confusion(table, f"rules on {dataset} ({role(dataset)})", out / picture)
    text = [
        f"## {dataset} ({role(dataset)}): correct per planted fault",
        "",
        tables.markdown(per_fault(ok, correct, dataset)),
        "",
        f"Confusion of the fitted rules on {dataset}:",
        "",
        tables.markdown(table),
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
    plots.plot_loss_curves(ok, dataset, out / curves)
    return [*text, f"![loss curves {dataset}]({curves})", ""]


def measurements_section(ok: pd.DataFrame, thresholds: dict[str, float], out: Path) -> list[str]:
    """The rules' features and thresholds, and the figure of each feature by planted fault."""
    plots.plot_measurements(ok, thresholds, out / "measurements.png")
    return [
        "## The measurements behind the rules",
        "",
        tables.markdown(tables.rule_thresholds(thresholds)),
        "",
        "![measurements](measurements.png)",
        "",
    ]


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


def device_section(folder: Path, out: Path) -> list[str]:
    """The device study's part of the report, or a line saying how to produce it."""
    from analysis.devices import crossover, study_table

    records = optional_records(folder)
    if records is None:
        return [
            "## When does a GPU pay?",
            "",
            f"No device study records in {folder}: `make gpu-study` produces them.",
            "",
        ]
    table = study_table(records)
    plots.plot_devices(table, out / "device_study.png")
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
        text += ["", tables.markdown(cross)]
    return [*text, "", "![device study](device_study.png)", ""]


def early_section(records: pd.DataFrame, out: Path) -> tuple[list[str], list[str]]:
    """How early the rules can be trusted (the report's part and its accuracy lines), from the records' snapshots."""
    from analysis.early import accuracy_by_budget, lines

    summary = accuracy_by_budget(records)
    title = "## How early can the doctor be trusted?"
    if summary.empty:  # records written without snapshots (a hand-made or a doctor's record)
        return [title, "", "No record here keeps snapshots of its measurements at earlier step budgets.", ""], []
    plots.plot_early(summary, out / "early.png")
    text = [
        title,
        "",
        "The same cells as they were after 50 to 600 steps (each cell keeps a snapshot of its measurements at every "
        "budget), judged with the thresholds fitted for that budget, as the doctor judges a run of that length.",
        "",
        tables.markdown(tables.early_scores(summary)),
        "",
        "![early](early.png)",
        "",
    ]
    return text, lines(summary)


def pairs_section(folder: Path, records: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """Two faults at once (the report's part and its accuracy lines), where records exist."""
    from analysis import pairs

    title = "## Two faults at once"
    absent = [title, "", f"No two-fault records in {folder}: `make pairs` produces them.", ""]
    records = optional_records(folder) if records is None else records
    if records is None:
        return absent, []
    try:
        shown, table, counts = pairs.parts(records, folder)
    except NothingToFit:
        return absent, []
    intro = (
        f"Two faults planted in one cell ({folder}; {pairs.pair_count(table)} pairs that "
        "set no key twice). The diagnosis is the set of verdicts whose rules fired, with the thresholds fitted on "
        "single faults; `both` counts cells where both planted faults are in it, `exact` cells where nothing else "
        "is. Goal: both named in at least 80% of the held-out cells."
    )
    return [title, "", intro, "", *tables.as_markdown(shown)], pairs.accuracy_lines(counts)


def families_section(folder: Path, records: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """Other model families (the report's part and its accuracy lines), where records exist."""
    from analysis import families

    title = "## Other model families"
    absent = [title, "", f"No records of other families in {folder}: `make families` produces them.", ""]
    records = optional_records(folder) if records is None else records
    if records is None:
        return absent, []
    try:
        shown, scores = families.parts(records, folder)
    except NothingToFit:
        return absent, []
    intro = (
        f"The same faults on other models ({folder}). `rules`: the thresholds fitted on the MLP's runs on digits and "
        "the zoo, unchanged (held out: these families were never seen while fitting). `rules-refit`: thresholds "
        "refitted on the family's own records, each seed scored by a fit without it. Fault cells whose fault did "
        "no measurable harm against their healthy twin are left out. Goal: held out at least 95%."
    )
    return [title, "", intro, "", *tables.as_markdown(shown)], accuracy_lines(scores)


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


def limits_section() -> list[str]:
    """What the scores above do not cover."""
    return [
        "## What these scores do not cover",
        "",
        "- At most two faults at once, and only pairs that set different keys of the recipe.",
        "- Four small model families (MLP, CNN, GRU, a transformer encoder of width 8) on small problems; large models"
        " were not tested.",
        "- Faults come in three sizes at most; sizes that did no measurable harm are left out of the zoo's scores.",
        "- The generated problems are tabular; real failing runs are messier.",
        "",
    ]


def lines_section(lines: list[str]) -> list[str]:
    """Every section's machine-readable lines, in a code block: the last section."""
    return ["## Machine-readable lines", "", "```", *lines, "```"]
