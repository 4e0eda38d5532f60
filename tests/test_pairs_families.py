"""Two faults at once and other model families: how they are scored, on hand-made records and on real cells."""

import pandas as pd
import pytest
from conftest import SHORT, make_config
from hand_records import PLANTED, THRESHOLDS, record

from analysis import families, pairs
from analysis.load import load_records
from analysis.report import families_section, pairs_section
from analysis.score import accuracy_lines
from harness.cell import run_cell
from harness.records import write_record


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


def test_a_pair_is_both_one_or_neither_named_and_masking_is_listed():
    table = pairs.outcomes(
        pd.DataFrame(
            [
                pair("starved_loader", "no_zero_grad", **PLANTED["starved_loader"], **PLANTED["no_zero_grad"]),
                pair("starved_loader", "dead_relu", **PLANTED["starved_loader"]),  # dead_relu left no trace
                pair("frozen_params", "lr_too_low"),  # neither left a trace
            ]
        ),
        THRESHOLDS,
    )
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


def test_families_are_scored_with_the_mlp_thresholds_and_refitted_leaving_one_seed_out():
    frame = pd.DataFrame([family_record(v, s) for v in ("healthy", "starved_loader", "no_zero_grad") for s in range(3)])
    table = families.predictions(frame, THRESHOLDS)
    summary = families.accuracy(table)
    assert summary[["family", "method", "correct", "total", "role"]].values.tolist() == [
        ["cnn", "rules", 9, 9, "held-out"],
        ["cnn", "rules-refit", 9, 9, "refit-loso"],
    ]
    assert accuracy_lines(summary)[0] == "accuracy digits rules 9/9 held-out family=cnn steps=600"
    assert families.per_fault(table).loc["no_zero_grad", "cnn rules"] == "3/3"


@pytest.mark.slow
def test_report_sections_from_real_pair_and_family_cells(tmp_path):
    for overrides in (["fault=[lr_too_high,starved_loader]"], ["model=cnn", "fault=no_zero_grad"]):
        write_record(run_cell(make_config(*SHORT, *overrides)), tmp_path / "records")
    records = load_records(tmp_path / "records")
    text, lines = pairs_section(tmp_path, tmp_path, records)
    assert text[0] == "## Two faults at once" and len(lines) == 1
    assert lines[0].startswith("accuracy digits rules-both-named ") and lines[0].endswith("steps=40 faults=2")
    text, lines = families_section(tmp_path, tmp_path, records[records.model == "cnn"])
    assert text[0] == "## Other model families"
    # One seed: nothing to refit on, so no rules-refit score, and the section says why.
    assert {line.split()[2] for line in lines} == {"rules"} and "family=cnn steps=40" in lines[0]
    assert "No rules-refit score for cnn: leave-one-seed-out needs two seeds." in text
