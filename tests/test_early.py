"""How early can the doctor be trusted: the same cells at each step budget, each budget with its own thresholds."""

import math

import pandas as pd

from analysis.early import accuracy_by_budget, lines
from analysis.features import at_budget, budgets_of
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
