"""How early can the doctor be trusted: the same cells at each step budget, each budget with its own thresholds."""

import math

import pandas as pd
import pytest

from analysis.early import accuracy_by_budget, lines
from analysis.features import at_budget, budgets_of
from harness.column import EVERY_STEP, F64, I64, STEPS_DONE, Column, list_of
from harness.columns import ALONG_THE_RUN, along_the_run
from harness.records import CHECKPOINT_COLUMNS, empty_record


def cell(dataset: str, wait_at_50: float) -> dict:
    """A starved-loader cell of 600 steps: its loop waits 3x its compute at the end, `wait_at_50` x at step 50."""
    final = {
        "steps": 600,
        "first_loss": 2.3,
        "data_wait_s": 3.0,
        "loop_s": 4.0,
        "params_without_grad_share": 0.0,
        "accumulation_ratio": 1.0,
        "grad_carried_share": 0.0,
        "backwards_per_step": 1.0,
        "dead_unit_share_init": 0.0,
        "update_ratio_peak": 1.5e-2,
        "final_val_acc": 0.97,
        "final_train_acc": 1.0,
    }
    early = {**final, "steps": 50, "data_wait_s": wait_at_50, "loop_s": 1.0 + wait_at_50}
    return {
        **empty_record(),
        **final,
        "cell_id": f"{dataset}{wait_at_50}",
        "status": "ok",
        "diagnosis": "starved_loader",
        "dataset": dataset,
        "model": "mlp",
        "ln_classes": math.log(10),
        "n_classes": 10,
        "baseline_val_acc": 0.1,
        "reference_val_acc": 0.97,
        "checkpoints": [{k: early.get(k) for k in CHECKPOINT_COLUMNS}, {k: final.get(k) for k in CHECKPOINT_COLUMNS}],
        "val_steps": [0, 50, 600],
        "val_acc_curve": [0.1, 0.8, 0.97],
        "val_loss_curve": [2.3, 0.6, 0.1],
        "train_loss_curve": [2.3] * 600,
    }


def test_a_budget_replaces_the_measurements_by_that_steps_snapshot_and_cuts_the_curves():
    records = pd.DataFrame([cell("digits", 0.01)])
    assert budgets_of(records) == [50, 600]
    early = at_budget(records, 50).iloc[0]
    assert early.steps == 50 and early.data_wait_s == 0.01 and early.loop_s == 1.01
    assert early.val_steps == [0, 50] and early.val_acc_curve == [0.1, 0.8] and len(early.train_loss_curve) == 50
    assert at_budget(records, 100).empty


def test_a_budget_cuts_every_list_laid_along_the_run_by_its_declaration():
    # The trap: a hand-kept list of curves to cut left a feature on any other curve reading the run's end when the
    # rules were fitted at 50 steps. Every list declared along the run is cut here, whichever it is.
    record = cell("digits", 0.01)
    record |= {"census_steps": [0, 1, 2, 4, 8, 16, 32, 50, 100], "loss_spike_steps": [3, 49, 50, 300]}
    lengths = {"census_steps": 7, "loss_spike_steps": 2, "val_steps": 2, "train_loss_curve": 50}
    for name, along in ALONG_THE_RUN.items():
        if along == "census_steps":
            record[name] = [float(i) for i in range(9)]
            lengths[name] = 7
        elif along == "val_steps":
            lengths[name] = 2
    assert set(lengths) == set(ALONG_THE_RUN)  # a list declared along the run since is cut too: add it above
    early = at_budget(pd.DataFrame([record]), 50).iloc[0]
    assert {name: len(early[name]) for name in ALONG_THE_RUN} == lengths
    assert list(early.loss_spike_steps) == [3, 49] and list(early.census_steps)[-1] == 32


def test_every_list_column_says_what_it_is_laid_along():
    with pytest.raises(ValueError, match=r"list column 'throwaway_curve' must say what it is laid along"):
        Column("throwaway_curve", list_of(F64), "a reading at each step")
    with pytest.raises(ValueError, match=r"column 'x' is no list"):
        Column("x", F64, "one reading", along=EVERY_STEP)
    laid = [Column("steps_read", list_of(I64), "steps", along=STEPS_DONE), Column("at", list_of(F64), "x", along="y")]
    with pytest.raises(ValueError, match=r"column 'at' is laid along 'y': neither a layout .* nor a column of steps"):
        along_the_run(laid)


def test_rules_are_scored_per_budget_and_dataset():
    records = pd.DataFrame([cell("digits", 0.01), cell("synthetic", 5.0)])
    summary = accuracy_by_budget(records)
    assert summary[["steps", "dataset", "correct", "total", "role"]].values.tolist() == [
        [50, "digits", 0, 1, "in-sample"],  # at 50 steps this loop had hardly waited yet
        [50, "synthetic", 1, 1, "held-out"],
        [600, "digits", 1, 1, "in-sample"],
        [600, "synthetic", 1, 1, "held-out"],
    ]
    assert lines(summary)[0] == "accuracy digits rules 0/1 in-sample family=mlp steps=50"
