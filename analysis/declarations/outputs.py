"""The outputs family's features: what the model's output is, and what the loss is handed.

Read by the checks of analysis/checks/outputs.py.
"""

import math
from collections.abc import Mapping

from analysis.feature import Feature, column
from harness.targets import BINARY_LOSSES


def _output_prob_share(m: Mapping) -> float:
    """The share of output rows that were probabilities, or 0 where the reach probe found rows that do not sum to 1.

    A softmax's rows sum to 1 for any input; two sigmoids' rows do only by chance, as saturated ones often do (one
    near 1, the other near 0). The reach probe (inputs and output layer scaled up 1000x) measures
    `logit_reach_span` only where some row did not sum to 1: then there is no softmax at the end of the model.
    """
    share = column(m, "output_prob_share")
    return 0.0 if share > 0 and not math.isnan(column(m, "logit_reach_span")) else share


def _single_label_bce(m: Mapping) -> float:
    """1 when the loss is binary cross-entropy on one-hot rows of three classes or more, else 0 (NaN: not read).

    With two classes, two sigmoids on one-hot rows are a proper model of one label; with three or more, most
    of the yes/no targets are no, and nothing makes the outputs choose one class.
    """
    kind, task = m.get("loss_kind"), m.get("task")
    if not isinstance(kind, str) or not isinstance(task, str) or task in ("", "unknown"):
        return math.nan
    if kind not in BINARY_LOSSES or task != "onehot":
        return 0.0
    return float(column(m, "ln_classes") > math.log(2.5))  # one-hot rows: ln_classes is ln C (regression: a variance)


DECLARED = (
    Feature(
        "output_prob_share",
        "share of output rows handed to the loss that are already probabilities (0 where the reach probe finds"
        " rows that do not sum to 1)",
        "the output rows checked: a share, whatever the batch size",
        False,
        _output_prob_share,
        reads=("logit_reach_span", "output_prob_share"),
    ),
    Feature(
        "logit_reach_span",
        "how far apart the values a softmax loss is handed can get, with the inputs and output layer scaled up",
        "the softmax's own arithmetic: values at most d apart leave any class at most e^d / (e^d + C - 1)",
        True,
        lambda m: column(m, "logit_reach_span"),
        reads=("logit_reach_span",),
    ),
    Feature(
        "single_label_bce",
        "1 when the loss is binary cross-entropy and the targets are one-hot rows of 3 or more classes",
        "the targets' own coding and the loss's own arithmetic, read on the first batch: any task, any model",
        False,
        _single_label_bce,
        reads=("ln_classes", "loss_kind", "task"),
    ),
    Feature(
        "output_spread",
        "the output's standard deviation across a batch's examples over its RMS, after training",
        "the output's own size: 0 exactly when every input gets the same output, at any scale",
        False,
        lambda m: column(m, "output_spread"),
        reads=("output_spread",),
    ),
    Feature(
        "target_reach_gap",
        "share of the targets outside what the output can produce, with the inputs scaled up to 1000x",
        "the targets themselves (a share): only for targets shaped like the output, not class indices",
        False,
        lambda m: column(m, "target_reach_gap"),
        reads=("target_reach_gap",),
    ),
)
