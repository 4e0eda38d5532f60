"""Two faults at once and other model families: how they are scored, on hand-made records and on real cells."""

import pandas as pd
import pytest
from conftest import SHORT, make_config
from hand_records import PLANTED, THRESHOLDS, record

from analysis import families, pairs
from analysis.__main__ import main
from analysis.load import load_records
from analysis.rules import RULES
from analysis.score import accuracy_lines
from analysis.sections import families_section, pairs_section
from harness.cell import run_cell
from harness.records import SCHEMA_ID, write_record


def pair(first: str, second: str, seed: int = 0, **measurements) -> pd.Series:
    return record(
        diagnosis=None,
        verdicts=[first, second],
        cell_id=f"{first}+{second}-{seed}",
        seed=seed,
        model="mlp",
        config_yaml="loop:\n  steps: 600\n",
        **measurements,
    )


def three_pairs() -> list[pd.Series]:
    """Both, one and neither named: the second pair's dead_relu and both faults of the third left no trace."""
    return [
        pair("starved_loader", "no_zero_grad", **PLANTED["starved_loader"], **PLANTED["no_zero_grad"]),
        pair("starved_loader", "dead_relu", **PLANTED["starved_loader"]),
        pair("frozen_params", "lr_too_low"),
    ]


def written(rows: list[pd.Series], folder) -> str:
    """The hand-made rows written as a sweep writes records; returns the folder as the commands print it."""
    for row in rows:
        write_record({**row.to_dict(), "started_at": None, "schema_id": SCHEMA_ID}, folder)
    return str(folder)


def test_a_pair_is_both_one_or_neither_named_and_masking_is_listed():
    table = pairs.outcomes(pd.DataFrame(three_pairs()), THRESHOLDS)
    assert table.outcome.tolist() == ["both", "one", "neither"]
    assert table.extra.tolist() == [0, 0, 0]
    counts = pairs.summary(table)
    assert counts[["both", "one", "neither", "cells"]].values.tolist() == [[1, 1, 1, 3]]
    assert pairs.accuracy_lines(counts) == [
        "accuracy digits rules-both-named 1/3 in-sample family=mlp steps=600 faults=2"
    ]
    masks = pairs.masking(table)
    assert {(r.hidden, r.behind) for r in masks.itertuples()} == {
        ("dead_relu", "starved_loader"),
        ("frozen_params", "lr_too_low"),
        ("lr_too_low", "frozen_params"),
    }
    assert pairs.per_fault(table).loc["starved_loader", "named"] == "2/2"


def family_record(verdict: str, seed: int) -> pd.Series:
    return record(
        diagnosis=verdict,
        cell_id=f"cnn-{verdict}-{seed}",
        seed=seed,
        model="cnn",
        config_yaml="loop:\n  steps: 600\n",
        **PLANTED.get(verdict, {}),
    )


def nine_family_cells() -> list[pd.Series]:
    return [family_record(v, s) for v in ("healthy", "starved_loader", "no_zero_grad") for s in range(3)]


def test_families_are_scored_with_the_mlp_thresholds_and_refitted_leaving_one_seed_out():
    frame = pd.DataFrame(nine_family_cells())
    table = families.predictions(frame, THRESHOLDS)
    summary = families.accuracy(table)
    assert summary[["family", "method", "correct", "total", "role"]].values.tolist() == [
        ["cnn", "rules", 9, 9, "held-out"],
        ["cnn", "rules-refit", 9, 9, "refit-loso"],
    ]
    assert accuracy_lines(summary)[0] == "accuracy digits rules 9/9 held-out family=cnn steps=600"
    assert families.per_fault(table).loc["no_zero_grad", "cnn rules"] == "3/3"


def test_the_pairs_command_prints_its_tables_as_text_then_its_accuracy_lines(tmp_path, capsys):
    folder = written(three_pairs(), tmp_path / "pairs")
    assert main(["pairs", folder]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        f"two faults at once ({folder}): 3 pairs, 3 cells; both: both planted faults named, exact: nothing else named",
        "dataset family  steps      role both share  one  neither exact",
        " digits    mlp    600 in-sample  1/3   33%    1        1   3/3",
        "",
        "How often each fault was named when planted with another:",
        "         fault named",
        "     dead_relu   0/1",
        " frozen_params   0/1",
        "    lr_too_low   0/1",
        "  no_zero_grad   1/1",
        "starved_loader   2/2",
        "",
        "Pairs that mask: the hidden fault was named in none of the pair's cells.",
        "       hidden         behind  cells  named instead",
        "frozen_params     lr_too_low      1        nothing",
        "   lr_too_low  frozen_params      1        nothing",
        "    dead_relu starved_loader      1 starved_loader",
        "",
        "accuracy digits rules-both-named 1/3 in-sample family=mlp steps=600 faults=2",
    ]


def test_the_families_command_prints_its_tables_as_text_then_its_accuracy_lines(tmp_path, capsys):
    folder = written(nine_family_cells(), tmp_path / "families")
    assert main(["families", folder, "--out", str(tmp_path / "unused")]) == 0  # --out: still accepted
    out, err = capsys.readouterr()
    assert err == "" and not (tmp_path / "unused").exists()
    absent = ", ".join(r.verdict for r in RULES if r.verdict not in ("starved_loader", "no_zero_grad"))
    assert out.splitlines() == [
        f"other model families ({folder}): rules: the MLP's thresholds unchanged (held out); rules-refit: refitted "
        "on the family's own records, leaving one seed out",
        "family dataset steps rules rules-refit",
        "   cnn  digits   600   9/9         9/9",
        "",
        "Correct per planted fault:",
        "       planted cnn rules cnn rules-refit",
        "       healthy       3/3             3/3",
        "  no_zero_grad       3/3             3/3",
        "starved_loader       3/3             3/3",
        "",
        "Rules the refits could not fit on a family's records kept their committed thresholds:",
        f"- no cell of its fault in these records: {absent}",
        "",
        "accuracy digits rules 9/9 held-out family=cnn steps=600",
        "accuracy digits rules-refit 9/9 refit-loso family=cnn steps=600",
    ]


def test_a_family_with_one_seed_shows_no_refit_score_in_the_terminal_and_the_report(tmp_path, capsys):
    one_seed = [family_record(v, 0) for v in ("healthy", "starved_loader")]
    for row in one_seed:
        row["model"], row["cell_id"] = "gru", f"gru-{row['cell_id']}"
    folder = written([*nine_family_cells(), *one_seed], tmp_path / "families")
    assert main(["families", folder]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == [
        "family dataset steps rules rules-refit",
        "   cnn  digits   600   9/9         9/9",
        "   gru  digits   600   2/2           -",
    ]
    assert "No rules-refit score for gru: leave-one-seed-out needs two seeds." in out
    text, _ = families_section(tmp_path / "families")
    assert "| gru | digits | 600 | 2/2 | - |" in "\n".join(text).splitlines()


@pytest.mark.slow  # a whole report (about 12 s)
def test_a_report_scores_single_faults_and_sends_two_fault_records_to_the_pairs_command(tmp_path, capsys):
    pairs_only = written(three_pairs(), tmp_path / "pairs")
    assert main(["report", pairs_only, "--out", str(tmp_path / "r1")]) == 2
    assert capsys.readouterr().err == (
        "error: nothing to report: no ok record that counts (0 failed or skipped, 0 whose fault did no harm, "
        "3 with two faults planted: `python -m analysis pairs` scores those)\n"
    )
    mixed = written([*three_pairs(), *nine_family_cells()], tmp_path / "mixed")
    assert main(["report", mixed, "--out", str(tmp_path / "r2")]) == 0
    out = capsys.readouterr().out
    assert "3 records with two faults planted left out: `python -m analysis pairs` scores them" in out.splitlines()
    assert "accuracy digits rules 9/9 in-sample family=cnn steps=600" in out.splitlines()


def test_the_pairs_and_families_commands_say_when_there_is_nothing_to_score(tmp_path, capsys):
    singles = written(nine_family_cells()[:1], tmp_path / "singles")
    assert main(["pairs", singles]) == 2
    assert capsys.readouterr().err == f"error: no two-fault records in {singles}: `make pairs` produces them\n"
    doubles = written(three_pairs(), tmp_path / "doubles")
    assert main(["families", doubles]) == 2
    assert (
        capsys.readouterr().err
        == f"error: no single-fault record to score in {doubles}: `make families` produces them\n"
    )


@pytest.mark.slow
def test_report_sections_from_real_pair_and_family_cells(tmp_path):
    for overrides in (["fault=[lr_too_high,starved_loader]"], ["model=cnn", "fault=no_zero_grad"]):
        write_record(run_cell(make_config(*SHORT, *overrides)), tmp_path / "records")
    records = load_records(tmp_path / "records")
    text, lines = pairs_section(tmp_path, records)
    assert text[0] == "## Two faults at once" and len(lines) == 1
    assert lines[0].startswith("accuracy digits rules-both-named ") and lines[0].endswith("steps=40 faults=2")
    text, lines = families_section(tmp_path, records[records.model == "cnn"])
    assert text[0] == "## Other model families"
    # One seed: nothing to refit on, so no rules-refit score, and the section says why.
    assert {line.split()[2] for line in lines} == {"rules"} and "family=cnn steps=40" in lines[0]
    assert "No rules-refit score for cnn: leave-one-seed-out needs two seeds." in text
