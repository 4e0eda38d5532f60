"""The formulas that hold a run against a yardstick its own data provides, each reading one number.

A feature means the same on any task only when it is read against something the run itself provides: the class
prior (skill above the most frequent label), the quick references fitted on the same data (harness/reference.py),
a clean copy of the run's own model (harness/instruments/memorization.py), the token counts and a compressor on
the same text (harness/text.py), the references' data learning curve (analysis/data_forecast.py), validation's
class mix (with `too_few_in_class`, the floor under which a class is too thin in validation to read it, which
the doctor says through analysis/features.py). The outcome gate (analysis/outcome_gate.py) and the data, capacity
and language checks read these; their declarations are in analysis/declarations/.
"""

import math
from collections.abc import Mapping

import numpy as np

from analysis.data_forecast import data_forecast
from analysis.feature import column, ratio


def skill_above(accuracy: float, baseline: float) -> float:
    """Accuracy above the baseline, as a share of the room above it: 0 = learned nothing, 1 = perfect."""
    if math.isnan(accuracy) or math.isnan(baseline) or baseline >= 1:
        return math.nan
    return (accuracy - baseline) / (1 - baseline)


def prior_baseline(m: Mapping) -> float:
    """What answering the most frequent training label scores: on validation if known, else the training prior."""
    baseline = column(m, "baseline_val_acc")
    return baseline if not math.isnan(baseline) else column(m, "majority_share")


def own_skill(m: Mapping) -> float:
    """The run's own skill in its task's metric: validation if measured, else training; 0 = baseline, 1 = perfect.

    Accuracy above the class prior for one class per example (and per label for multi-label, where the prior
    is known); R² itself for regression (its baseline, always predicting the mean, scores 0).
    """
    if m.get("task") == "regression":
        val, train = column(m, "final_val_acc"), column(m, "final_train_acc")
        return val if not math.isnan(val) else train
    baseline = prior_baseline(m)
    skill = skill_above(column(m, "final_val_acc"), baseline)
    return skill if not math.isnan(skill) else skill_above(column(m, "final_train_acc"), baseline)


def learnable_skill(m: Mapping) -> float:
    """The better of the model's and the references' validation skill; NaN for regression (no class prior).

    NaN for a sequence too: no quick reference fits a label per position, and the model's skill alone cannot say
    the labels are unlearnable, as how much of the room above the prior a next token leaves reachable is the
    text's own (its entropy), which nothing here measures.
    """
    if m.get("task") in ("regression", "sequence"):
        return math.nan
    baseline = prior_baseline(m)
    return np.fmax(
        skill_above(column(m, "final_val_acc"), baseline), skill_above(column(m, "reference_val_acc"), baseline)
    )


def skill_shortfall(m: Mapping) -> float:
    """The share of the quick references' skill on the same data that the run's own skill falls short of.

    0 when the run reaches the references, 1 when it learned nothing, negative when it beats them. Relative, so
    that a few points short on a hard problem (references at a skill of 0.3) weigh as much as many on an easy one.
    NaN where the references learned next to nothing (a skill under 0.05: no yardstick) or none exist.
    """
    reference = skill_above(column(m, "reference_val_acc"), prior_baseline(m))
    if not reference > 0.05:
        return math.nan
    return (reference - own_skill(m)) / reference


def below_z(m: Mapping, yardstick: float, n: float) -> float:
    """How many standard errors the run's accuracy lies below a yardstick's accuracy on `n` examples.

    The run's accuracy is its validation accuracy (its training accuracy where it has no validation); the spread
    is that of two binomial proportions on the yardstick's examples. NaN where either accuracy or the count is
    missing.
    """
    own = column(m, "final_val_acc")
    own = own if not math.isnan(own) else column(m, "final_train_acc")
    if math.isnan(yardstick) or math.isnan(own) or not n > 0:
        return math.nan
    spread = (max(yardstick * (1 - yardstick), 1e-4) + max(own * (1 - own), 1e-4)) / n
    return (yardstick - own) / math.sqrt(spread)


def shortfall_z(m: Mapping) -> float:
    """How many standard errors the run's accuracy lies below the references' on the same validation examples."""
    return below_z(m, column(m, "reference_val_acc"), column(m, "reference_val_examples"))


# The tasks a clean copy's validation score is no yardstick on: the gate reads skill above the class prior with a
# binomial sampling error, one class per example; R², per-label and per-position scores have neither.
NO_COPY_YARDSTICK = ("regression", "multilabel", "sequence")


# What the run against its clean copy reads: the copy's score and the run's own, above the class prior.
COPY_GAP_READS = (
    "baseline_val_acc",
    "capacity_val_examples",
    "capacity_val_score",
    "final_train_acc",
    "final_val_acc",
    "majority_share",
    "task",
)


def copy_skill(m: Mapping) -> float:
    """A clean copy of the run's model scored on validation: its skill above the class prior (NaN: no copy)."""
    if m.get("task") in NO_COPY_YARDSTICK or not column(m, "capacity_val_examples") > 0:
        return math.nan
    return skill_above(column(m, "capacity_val_score"), prior_baseline(m))


def copy_gap(m: Mapping) -> float:
    """How much skill the run falls short of a clean copy of its own model by (negative: it beats the copy)."""
    return copy_skill(m) - own_skill(m)


def copy_z(m: Mapping) -> float:
    """How many standard errors the run's accuracy lies below the clean copy's, on the copy's validation examples."""
    if math.isnan(copy_skill(m)):
        return math.nan
    return below_z(m, column(m, "capacity_val_score"), column(m, "capacity_val_examples"))


def fit_vs_reference(m: Mapping) -> float:
    """Training accuracy over what the references reach on held-out examples, both above the baseline."""
    baseline = prior_baseline(m)
    room = column(m, "reference_val_acc") - baseline
    if not room > 0.05:  # the references learned next to nothing: no yardstick
        return math.nan
    return ratio(column(m, "final_train_acc") - baseline, room)


# The share of the logits at a floor (a ReLU or clamp on them) over which a run's logits are read as clamped
# (analysis/checks/outputs.py: clamped_logits, whose threshold this is). Such a model cannot show its capacity:
# whole classes never win, and a wider layer does not help, so the capacity evidence is not read on it.
FLOORED_LOGITS = 0.05


def capacity_fit(m: Mapping) -> float:
    """What the model has shown it can fit of the training examples, over what the references fit of them.

    What it has shown is the better of two fits: a fresh copy's in a clean loop (the capacity fit), and the run's
    own training score. A short clean fit can fall short where the run's own longer training got there (Adam
    moves a weight by about its rate per step, so 100 steps at 1e-2 cannot reach a weight of 5), and a model
    that fitted the examples in its own run has the capacity, whatever the clean fit reached. Without a capacity
    fit (no model factory, or it was turned off) there is no evidence either way: NaN.
    Both are measured above the constant answer's score. The references' fit is the better of a ridge
    classifier's accuracy on its own training examples and 5-NN's leave-one-out accuracy: on noisy or
    overlapping classes neither reaches 1, and a model with room to spare still fits at least as much. Without a
    reference (regression, multi-label: the references are classifiers) there is no yardstick, and no evidence
    either way: a perfect fit is no yardstick, since noisy targets keep any model's R² under 1.
    """
    if column(m, "logit_floor_share") > FLOORED_LOGITS:  # classes that can never win: no capacity evidence
        return math.nan
    baseline, fitted = column(m, "capacity_baseline"), column(m, "capacity_score")
    references = [column(m, "reference_train_acc"), column(m, "reference_loo_acc")]
    finite = [value for value in references if not math.isnan(value)]
    if math.isnan(fitted) or not finite:
        return math.nan
    room = max(finite) - baseline
    if not room > 0.05:  # the references fit next to nothing beyond the constant answer: no yardstick
        return math.nan
    own = column(m, "final_train_acc")
    shown = fitted if math.isnan(own) else max(fitted, own)
    return ratio(shown - baseline, room)


def excess_error(train_acc: float, val_acc: float, n_train: float, n_val: float) -> float:
    """How many standard errors the error on the training labels exceeds the error on validation."""
    train_error, val_error = 1 - train_acc, 1 - val_acc
    spread = max(train_error * (1 - train_error), 1e-4) / max(n_train, 1) + max(
        val_error * (1 - val_error), 1e-4
    ) / max(n_val, 1)
    return (train_error - val_error) / math.sqrt(spread)


def label_noise_z(m: Mapping) -> float:
    """Wrong training labels: the references err more on the training labels than on validation, in standard errors.

    Two yardsticks, the larger counts: 5 nearest neighbours outvoting an example's label (left out) against
    their error on validation, and a ridge classifier's error on its own training examples against validation.
    On clean labels both sit within a couple of standard errors; a hard task raises both errors alike.
    """
    n_train, n_val = column(m, "reference_examples"), column(m, "reference_val_examples")
    neighbours = excess_error(column(m, "reference_loo_acc"), column(m, "reference_knn_val_acc"), n_train, n_val)
    linear = excess_error(column(m, "reference_train_acc"), column(m, "reference_linear_val_acc"), n_train, n_val)
    return float(np.fmax(neighbours, linear))


def data_gain(m: Mapping) -> float:
    """The skill the references are forecast to gain from twice the examples (analysis/data_forecast.py).

    In units of the room above the baseline, like every skill here. NaN without a data learning curve (no
    references: regression, multi-label, inputs whose rows are not the examples).
    """
    made = data_forecast(m.get("data_curve_examples"), m.get("data_curve_val_acc"), column(m, "reference_val_examples"))
    baseline = prior_baseline(m)
    if made is None or math.isnan(baseline) or baseline >= 1:
        return math.nan
    return made.gain / (1 - baseline)


def loss_under_compressor(m: Mapping) -> float:
    """The lower finite one of the final training and validation losses, over the compressor's rate; NaN without."""
    losses = [v for v in (column(m, "final_train_loss"), column(m, "final_val_loss")) if math.isfinite(v)]
    return ratio(min(losses), column(m, "lm_compressor_val_loss")) if losses else math.nan


def counts_loss(m: Mapping) -> float:
    """The token counts' validation loss: the lower of the unigram's and the bigram's (NaN without either)."""
    return float(np.fmin(column(m, "lm_bigram_val_loss"), column(m, "lm_unigram_val_loss")))


def loss_over_counts(m: Mapping) -> float:
    """The final validation loss (else training) over the token counts' on the same text; NaN without them.

    The counts' loss is the better (lower) of the unigram's and the bigram's: on a large vocabulary and a little
    text, add-one smoothing over every pair costs the bigram more than its context gains (harness/text.py).
    """
    counts = counts_loss(m)
    loss = column(m, "final_val_loss")
    loss = column(m, "final_train_loss") if math.isnan(loss) else loss
    if math.isnan(counts) or math.isnan(loss) or counts <= 0:
        return math.nan
    return loss / counts  # an infinite loss (diverged) is infinitely worse


def counts_noise(m: Mapping) -> float:
    """The token counts' validation loss's standard error over that loss: the sampling error of loss_over_counts."""
    return ratio(column(m, "lm_counts_val_se"), counts_loss(m))


# The fewest validation examples of a class for its share of validation to be read against its share of training
# (`prior_shift`). A count of n has a sampling error of about sqrt(n): at 10 a doubled share is 3 errors from the
# expected one; at 4 it is 2, and the shift reads the largest of every class's ratios, so among a handful of classes
# one of them doubles by chance. Fixed by that argument, not fitted; every grid and zoo problem has 12 or more of
# each class in validation.
PER_CLASS_FLOOR = 10


def too_few_in_class(measurements: Mapping) -> str | None:
    """Why the class mix's shift is not judged on this run (None: it is): its class has too few validation examples.

    NaN (a record from before schema 24, or no validation): no floor to apply.
    """
    count = column(measurements, "prior_shift_class_examples")
    if 0 < count < PER_CLASS_FLOOR:
        return (
            f"the class it reads has {count:.0f} validation examples, fewer than {PER_CLASS_FLOOR}: too few to tell"
            " a shifted class mix from chance"
        )
    return None


def prior_shift(m: Mapping) -> float:
    """The class most under-represented in training, against validation's mix; NaN without validation.

    Without validation nothing tells a problem uneven by nature (most real data) from a training set that lost a
    class: the raw training imbalance is no fault of its own, so the rule is not judged. Nor where that class has
    too few validation examples for its share to mean anything (`too_few_in_class`).
    """
    return math.nan if too_few_in_class(m) else column(m, "prior_shift")
