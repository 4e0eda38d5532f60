"""How early can the doctor be trusted: the rules scored per step budget."""

import math

import pandas as pd

from analysis.early import accuracy_by_budget, accuracy_lines, budgets
from analysis.rules import load_thresholds
from harness.records import empty_record


def cell(steps: int, dataset: str, wait: float) -> dict:
    """A starved-loader cell: healthy but for the data wait, which the short run has not yet shown."""
    return {
        **empty_record(),
        "cell_id": f"{dataset}{steps}{wait}",
        "status": "ok",
        "diagnosis": "starved_loader",
        "dataset": dataset,
        "model": "mlp",
        "config_yaml": f"loop:\n  steps: {steps}\n",
        "first_loss": 2.3,
        "ln_classes": math.log(10),
        "n_classes": 10,
        "data_wait_share": wait,
        "params_without_grad_share": 0.0,
        "accumulation_ratio": 1.0,
        "dead_unit_share_init": 0.0,
        "dead_unit_share": 0.0,
        "update_ratio_median": 1e-3,
        "update_ratio_peak": 1.5e-2,
        "final_val_acc": 0.97,
        "final_train_acc": 1.0,
        "memorize_best_loss": 0.0,
        "memorize_rates": [1e-3],
        "memorize_losses": [0.0],
    }


def test_rules_are_scored_per_budget_and_dataset():
    records = pd.DataFrame([cell(50, "digits", 0.1), cell(600, "digits", 0.7), cell(600, "synthetic", 0.7)])
    assert budgets(records).tolist() == [50, 600, 600]
    summary = accuracy_by_budget(records, load_thresholds())
    assert summary[["steps", "dataset", "correct", "total", "role"]].values.tolist() == [
        [50, "digits", 0, 1, "in-sample"],
        [600, "digits", 1, 1, "in-sample"],
        [600, "synthetic", 1, 1, "held-out"],
    ]
    assert accuracy_lines(summary) == [
        "accuracy digits rules 0/1 in-sample family=mlp steps=50",
        "accuracy digits rules 1/1 in-sample family=mlp steps=600",
        "accuracy synthetic rules 1/1 held-out family=mlp steps=600",
    ]
