"""The report: its sections (analysis/sections.py) assembled in order into reports/report.md, PNGs beside it."""

from itertools import chain
from pathlib import Path

import pandas as pd

from analysis import sections, tables
from analysis.fit import TUNED_DATASET, NothingToFit
from analysis.rules import load_thresholds
from analysis.score import accuracy_lines, score


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
    """Write report.md and its PNGs into `out`; return the text printed on the terminal and the accuracy lines.

    The studies given a folder (`zoo`, `devices`, `pairs`, `families`, `realbugs`) get their sections; one whose
    folder holds no records gets a line saying which command produces them. `early`: the step-budget section.
    """
    scores = score(records)
    ok = scores["records"]
    if ok.empty:
        failed = int((records.status != "ok").sum())
        pairs = len(scores["pairs"])
        raise NothingToFit(
            f"nothing to report: no ok record that counts ({failed} failed or skipped, "
            f"{len(scores['harmless'])} whose fault did no harm"
            + (f", {pairs} with two faults planted: `python -m analysis pairs` scores those" if pairs else "")
            + ")"
        )
    out.mkdir(parents=True, exist_ok=True)
    thresholds = load_thresholds()
    zoo_text, zoo_lines = sections.zoo_section(zoo) if zoo is not None else ([], [])
    early_text, early_lines = sections.early_section(ok, out) if early else ([], [])
    pairs_text, pairs_lines = sections.pairs_section(pairs) if pairs is not None else ([], [])
    families_text, families_lines = sections.families_section(families) if families is not None else ([], [])
    realbugs_text, realbugs_lines = sections.realbugs_section(realbugs) if realbugs is not None else ([], [])
    lines = [*accuracy_lines(scores["accuracy"]), *zoo_lines, *early_lines, *pairs_lines, *families_lines]
    lines += realbugs_lines
    per_dataset = [sections.dataset_section(scores, dataset, thresholds, out) for dataset in scores["datasets"]]
    text = [
        *sections.title_section(records, scores),
        *sections.accuracy_section(scores),
        *chain.from_iterable(per_dataset),
        *sections.measurements_section(ok, thresholds, out),
        *zoo_text,
        *(sections.device_section(devices, out) if devices is not None else []),
        *early_text,
        *pairs_text,
        *families_text,
        *realbugs_text,
        *sections.limits_section(),
        *sections.lines_section(lines),
    ]
    (out / "report.md").write_text("\n".join(text) + "\n")
    terminal = [tables.markdown(tables.scores_by_dataset(scores["accuracy"], scores["methods"])), ""]
    if scores["loso"]:
        terminal.append(f"leave-one-seed-out on {TUNED_DATASET}: {sections.loso_scores(scores)}")
    terminal += sections.slice_notes(scores)
    terminal += [f"kept committed threshold: {verdict}: {why}" for verdict, why in scores["kept"].items()]
    terminal += [*lines, f"report: {out / 'report.md'}"]
    return "\n".join(terminal), lines
