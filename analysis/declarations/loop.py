"""The loop family's features: how the loop feeds, clears, clips and switches mode, and what it hands the loss.

Read by the checks of analysis/checks/loop.py (and `accumulation_ratio` by the naive `no_zero_grad`).
"""

import math
from collections.abc import Mapping

import numpy as np

from analysis.feature import Feature, column


def _wait_ratio(m: Mapping) -> float:
    wait, loop = column(m, "data_wait_s"), column(m, "loop_s")
    compute = loop - wait
    return wait / compute if compute > 0 else math.nan


DECLARED = (
    Feature(
        "data_wait_ratio",
        "seconds waiting for batches per second of the loop's own compute",
        "the loop's own compute time: a wait that is long for a tiny MLP step is nothing for a big model's",
        True,
        _wait_ratio,
        reads=("data_wait_s", "loop_s"),
    ),
    Feature(
        "grad_carried_share",
        "share of optimizer steps whose next backward found .grad not cleared",
        "the optimizer steps: read from hooks, whatever the loss's scaling or the batches per step",
        False,
        lambda m: column(m, "grad_carried_share"),
        reads=("grad_carried_share",),
    ),
    Feature(
        "grad_kept_at_step",
        "gradient norm at the optimizer step over its norm after backward (unscaled), median over steps",
        "the gradient's own norm after backward: 1 exactly when nothing clips it, whatever its size",
        True,
        lambda m: column(m, "grad_kept_at_step"),
        reads=("grad_kept_at_step",),
    ),
    Feature(
        "targets_changed_share",
        "share of target rows the loss received that differ from the rows the batch handed over",
        "the rows compared: any batch size (read as labels: an encoding change is not a change)",
        False,
        lambda m: column(m, "targets_changed_share"),
        reads=("targets_changed_share",),
    ),
    Feature(
        "accumulation_ratio",
        "norm of .grad over the norm of a fresh gradient of the same loss",
        "a fresh gradient of the same loss on the same batch: 1 exactly when .grad holds this step's gradient",
        True,
        lambda m: column(m, "accumulation_ratio"),
        reads=("accumulation_ratio",),
    ),
    Feature(
        "wrong_mode_share",
        "share of training (evaluation) forwards run in eval (training) mode",
        "the forwards counted (only in models with dropout or BatchNorm, where the mode matters)",
        False,
        lambda m: np.fmax(column(m, "train_in_eval_share"), column(m, "eval_in_train_share")),
        reads=("eval_in_train_share", "train_in_eval_share"),
    ),
)
