"""The naive features: the raw readings of the first, hand-set rules (analysis/naive_rules.py), kept for comparison.

They move with the task and the loop, which is why the fitted rules read the normalized features instead. They are
declared here, with the others, because the rules are built against `FEATURES` (analysis/checks/base.py), which
holds them too: analysis/features.py appends them to FEATURES_LIST after the normalized ones.
"""

import math
from collections.abc import Mapping

from analysis.feature import Feature, column


def _memorize_at_1e3(m: Mapping) -> float:
    rates, losses = m.get("memorize_rates"), m.get("memorize_losses")
    for rate, loss in zip(rates if rates is not None else [], losses if losses is not None else [], strict=False):
        if math.isclose(rate, 1e-3):
            return float(loss)
    return math.nan


NAIVE_FEATURES_LIST = [
    Feature(
        "data_wait_share",
        "share of the loop spent waiting for batches",
        "nothing",
        False,
        lambda m: column(m, "data_wait_share"),
        reads=("data_wait_share",),
    ),
    Feature(
        "val_acc_x_chance",
        "validation accuracy over chance (1/C)",
        "1/C",
        False,
        lambda m: column(m, "final_val_acc") * column(m, "n_classes"),
        reads=("final_val_acc", "n_classes"),
    ),
    Feature(
        "train_acc",
        "final training accuracy",
        "nothing",
        False,
        lambda m: column(m, "final_train_acc"),
        reads=("final_train_acc",),
    ),
    Feature(
        "memorize_loss_1e-3",
        "final loss memorizing 16 examples at 1e-3 only",
        "nothing",
        True,
        _memorize_at_1e3,
        reads=("memorize_losses", "memorize_rates"),
    ),
]
