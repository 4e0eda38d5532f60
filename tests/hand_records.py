"""Hand-made records shared by the tests: one that looks healthy, and for each rule the change that plants its fault.

The analysis tests judge these with the committed thresholds (`THRESHOLDS`); the pairs tests combine two faults.
A fault whose rule needs harm (analysis/rules.py, analysis/outcome_gate.py) is planted on a run that fell short of the
references (`FELL_SHORT`): on a run that learned as well, its finding is a warning (tests/test_outcome_gate.py).
"""

import math

import pandas as pd

from analysis.rules import HEALTHY, load_thresholds
from harness.records import empty_record

THRESHOLDS = load_thresholds()


# What a healthy 600-step digits run measures, by column: the record every hand-made record starts from.
HEALTHY_MEASUREMENTS = {
    "cell_id": "hand",
    "diagnosis": HEALTHY,
    "dataset": "digits",
    "seed": 0,
    "status": "ok",
    "steps": 600,
    "first_loss": 2.3,
    "ln_classes": math.log(10),
    "n_classes": 10,
    "data_wait_s": 0.05,
    "loop_s": 1.0,
    "data_wait_share": 0.05,
    "params_without_grad_share": 0.0,
    "accumulation_ratio": 1.0,
    "grad_carried_share": 0.0,
    "backwards_per_step": 1.0,
    "dead_unit_share_init": 0.0,
    "dead_unit_share": 0.01,
    "update_ratio_median": 1e-3,
    "update_ratio_peak": 1.5e-2,
    "final_val_acc": 0.97,
    "final_train_acc": 1.0,
    "final_val_loss": 0.13,
    "final_train_loss": 0.01,
    "input_rms": 0.9,
    "label_imbalance": 1.05,
    "majority_share": 0.1,
    "output_prob_share": 0.0,
    "train_in_eval_share": 0.0,
    "eval_in_train_share": 0.0,
    "grad_kept_at_step": 1.0,
    "lr_peak_share": 1.0,
    "lr_last_share": 1.0,
    "lr_decayed_share": 0.0,
    "weight_norm_ratio": 1.6,
    "unmoved_share": 0.0,
    "targets_changed_share": 0.0,
    "batch_label_mix": 1.0,
    "logit_reach_span": 3.4e4,  # a linear output layer, its weights scaled 1000x
    "lr_built": 1e-3,
    "activation_growth_init": 0.45,
    "grad_depth_ratio_init": 0.9,
    "saturated_share_init": math.nan,
    "periodic_spikes": 0,
    "confident_disagreement": 0.0,
    "baseline_val_acc": 0.1,
    "reference_val_acc": 0.97,
    "reference_train_acc": 0.99,
    "reference_linear_val_acc": 0.96,
    "reference_examples": 1024,
    "reference_val_examples": 450,
    "reference_loo_acc": 0.97,
    "reference_knn_val_acc": 0.97,
    "prior_shift": 1.1,
    # the references on an eighth, a quarter, a half and all of the examples: a curve that has flattened
    "data_curve_examples": [128, 256, 512, 1024],
    "data_curve_val_acc": [0.93, 0.95, 0.96, 0.97],
    "memorize_best_loss": 0.001,
    "memorize_rates": [1e-4, 1e-3, 1e-2],
    "memorize_losses": [0.5, 0.001, 0.0],
    "capacity_score": 1.0,  # a fresh copy fits every one of the examples: room to spare
    "capacity_baseline": 0.1,
    "capacity_rate": 1e-2,
    "capacity_examples": 1024,
}


def record(**measurements) -> pd.Series:
    """A hand-made record that looks healthy, with some measurements changed."""
    verdicts = [measurements.get("diagnosis", HEALTHY)]
    return pd.Series({**empty_record(), "verdicts": verdicts, **HEALTHY_MEASUREMENTS, **measurements})


# A run that learned measurably less than the references reach: what makes a check that needs harm failing.
FELL_SHORT = {"final_val_acc": 0.60, "final_train_acc": 0.62}

PLANTED = {
    "starved_loader": {"data_wait_s": 3.0, "loop_s": 4.0, "data_wait_share": 0.75},
    # A language model whose answer is in its input: the loss far under a compressor's rate on the same text.
    "answer_leak": {"final_train_loss": 0.03, "final_val_loss": 0.05, "lm_compressor_val_loss": 1.7},
    "frozen_params": {"params_without_grad_share": 0.92, **FELL_SHORT},
    "params_not_updated": {"unmoved_share": 0.9, **FELL_SHORT},  # the first layer left out of the optimizer
    "no_zero_grad": {"accumulation_ratio": 30.0, "grad_carried_share": 1.0},
    "wrong_mode": {"eval_in_train_share": 1.0},
    "over_clipped": {"grad_kept_at_step": 1.5e-5, "clipped_step_share": 1.0},
    "warmup_never_ends": {"lr_peak_share": 0.01, **FELL_SHORT},
    "rate_decayed_early": {"lr_decayed_share": 0.7, "lr_last_share": 3e-5, **FELL_SHORT},
    "weight_decay_dominates": {"weight_norm_ratio": 1e-3, **FELL_SHORT},
    "targets_changed_in_loop": {"targets_changed_share": 0.9, **FELL_SHORT},
    "double_softmax": {"output_prob_share": 1.0, "logit_reach_span": math.nan},  # rows that always sum to 1
    "squashed_logits": {"logit_reach_span": 1.0},  # a sigmoid after the last layer
    "bce_on_single_label": {"loss_kind": "bce_logits", "task": "onehot"},
    "unscaled_inputs": {"input_rms": 250.0, "first_loss": 35.0, **FELL_SHORT},
    "dead_relu": {"dead_unit_share_init": 1.0, **FELL_SHORT},
    "exploding_gradients": {"activation_growth_init": 150.0, "first_loss": 280.0, **FELL_SHORT},
    "vanishing_gradients": {"grad_depth_ratio_init": 1e-5, **FELL_SHORT},
    "saturated_activations": {"saturated_share_init": 0.6, **FELL_SHORT},
    "unshuffled_batches": {"batch_label_mix": 0.05},
    "class_imbalance": {"prior_shift": 20.0, "label_imbalance": 25.0},
    "periodic_bad_batch": {"periodic_spikes": 18, "loss_spike_period": 30.0, "loss_spike_steps": [59, 89, 119]},
    "lr_too_low": {"update_ratio_peak": 2e-5, **FELL_SHORT},
    "constant_output": {"output_spread": 0.0},
    "unreachable_targets": {"target_reach_gap": 0.5, "task": "regression"},
    "lr_too_high": {"update_ratio_peak": 1.5, "final_train_loss": 2.3, **FELL_SHORT},  # large steps, no fall
    # stopped at 100 steps on a curve whose time constant is 300: a learning curve fitted to it forecasts more fall
    # (judged at its own budget: at 400 and 600 steps the zoo's fit never fires the rule)
    "still_improving": {
        "steps": 100,
        "train_loss_curve": [0.1 + 2.2 * math.exp(-t / 300) for t in range(100)],
        **FELL_SHORT,
    },
    "shuffled_labels": {"final_val_acc": 0.1, "final_train_acc": 0.45, "reference_val_acc": 0.11},
    "label_noise": {"reference_loo_acc": 0.7, "reference_knn_val_acc": 0.95, "final_train_acc": 0.75},
    "overfitting": {"final_val_acc": 0.35, "final_val_loss": 2.4, "final_train_loss": 0.001},
    # Capacity evidence: a fresh copy in a clean loop cannot fit the examples either.
    "model_too_small": {"final_train_acc": 0.5, "final_val_acc": 0.48, "capacity_score": 0.55},
}
