"""Features: the one contract between what the instruments measure and what the rules read.

`features(measurements)` turns one plain mapping of measurements (a grid record, or what the doctor measured on
a user's run: the same keys, see harness/records.py) into a plain mapping of named features. Every feature is
normalized by something the run itself provides, so that it means the same on any task, optimizer, loop and
model: the class prior instead of 1/C, the run's own reference fit instead of a fixed accuracy, the step's own
compute time instead of a fixed share of the loop, the run's length instead of a fixed count. `FEATURES` is
the table: name, sentence, what it is normalized by, whether it spans orders of magnitude (then thresholds sit
at geometric midpoints and plots use log axes), how it is computed, and the record columns it is computed from
(`reads`: checked against harness/columns.py when the feature is built; the computation sees no other column).

`at_budget(records, steps)` gives the grid's records as they were at a step budget (each cell keeps a snapshot
of its measurements at every budget it reached), so that the same features can be read on shorter runs.
"""

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analysis.data_forecast import data_forecast
from analysis.forecast import forecast
from harness.columns import CHECKPOINT_COLUMNS, DECLARED_IN
from harness.columns import NAMES as COLUMN_NAMES
from harness.targets import BINARY_LOSSES

if TYPE_CHECKING:  # pandas is loaded where a table is built, so judging one run (the doctor) never loads it
    import pandas as pd


def _get(m: Mapping, key: str) -> float:
    value = m.get(key)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _div(a: float, b: float) -> float:
    """A / b, infinite for a positive a over 0, NaN where it means nothing."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if b == 0:
        return math.inf if a > 0 else math.nan
    return a / b


def _loss_under_compressor(m: Mapping) -> float:
    """The lower finite one of the final training and validation losses, over the compressor's rate; NaN without."""
    losses = [v for v in (_get(m, "final_train_loss"), _get(m, "final_val_loss")) if math.isfinite(v)]
    return _div(min(losses), _get(m, "lm_compressor_val_loss")) if losses else math.nan


def _counts_loss(m: Mapping) -> float:
    """The token counts' validation loss: the lower of the unigram's and the bigram's (NaN without either)."""
    return float(np.fmin(_get(m, "lm_bigram_val_loss"), _get(m, "lm_unigram_val_loss")))


def _loss_over_counts(m: Mapping) -> float:
    """The final validation loss (else training) over the token counts' on the same text; NaN without them.

    The counts' loss is the better (lower) of the unigram's and the bigram's: on a large vocabulary and a little
    text, add-one smoothing over every pair costs the bigram more than its context gains (harness/text.py).
    """
    counts = _counts_loss(m)
    loss = _get(m, "final_val_loss")
    loss = _get(m, "final_train_loss") if math.isnan(loss) else loss
    if math.isnan(counts) or math.isnan(loss) or counts <= 0:
        return math.nan
    return loss / counts  # an infinite loss (diverged) is infinitely worse


def _counts_noise(m: Mapping) -> float:
    """The token counts' validation loss's standard error over that loss: the sampling error of loss_over_counts."""
    return _div(_get(m, "lm_counts_val_se"), _counts_loss(m))


def _skill(accuracy: float, baseline: float) -> float:
    """Accuracy above the baseline, as a share of the room above it: 0 = learned nothing, 1 = perfect."""
    if math.isnan(accuracy) or math.isnan(baseline) or baseline >= 1:
        return math.nan
    return (accuracy - baseline) / (1 - baseline)


def prior_baseline(m: Mapping) -> float:
    """What answering the most frequent training label scores: on validation if known, else the training prior."""
    baseline = _get(m, "baseline_val_acc")
    return baseline if not math.isnan(baseline) else _get(m, "majority_share")


def _wait_ratio(m: Mapping) -> float:
    wait, loop = _get(m, "data_wait_s"), _get(m, "loop_s")
    compute = loop - wait
    return wait / compute if compute > 0 else math.nan


def _periodic_share(m: Mapping) -> float:
    """Spikes at the common period, as a share of the spikes that period would put in the run (needs 3 or more)."""
    period, gaps, steps = _get(m, "loss_spike_period"), _get(m, "periodic_spikes"), _get(m, "steps")
    if math.isnan(gaps) or gaps < 2 or not period > 0 or not steps > 0:
        return 0.0
    return (gaps + 1) / max(steps / period, 1.0)


def _learnable(m: Mapping) -> float:
    """The better of the model's and the references' validation skill; NaN for regression (no class prior).

    NaN for a sequence too: no quick reference fits a label per position, and the model's skill alone cannot say
    the labels are unlearnable, as how much of the room above the prior a next token leaves reachable is the
    text's own (its entropy), which nothing here measures.
    """
    if m.get("task") in ("regression", "sequence"):
        return math.nan
    baseline = prior_baseline(m)
    return np.fmax(_skill(_get(m, "final_val_acc"), baseline), _skill(_get(m, "reference_val_acc"), baseline))


def _own_skill(m: Mapping) -> float:
    """The run's own skill in its task's metric: validation if measured, else training; 0 = baseline, 1 = perfect.

    Accuracy above the class prior for one class per example (and per label for multi-label, where the prior
    is known); R² itself for regression (its baseline, always predicting the mean, scores 0).
    """
    if m.get("task") == "regression":
        val, train = _get(m, "final_val_acc"), _get(m, "final_train_acc")
        return val if not math.isnan(val) else train
    baseline = prior_baseline(m)
    skill = _skill(_get(m, "final_val_acc"), baseline)
    return skill if not math.isnan(skill) else _skill(_get(m, "final_train_acc"), baseline)


def _skill_shortfall(m: Mapping) -> float:
    """The share of the quick references' skill on the same data that the run's own skill falls short of.

    0 when the run reaches the references, 1 when it learned nothing, negative when it beats them. Relative, so
    that a few points short on a hard problem (references at a skill of 0.3) weigh as much as many on an easy one.
    NaN where the references learned next to nothing (a skill under 0.05: no yardstick) or none exist.
    """
    reference = _skill(_get(m, "reference_val_acc"), prior_baseline(m))
    if not reference > 0.05:
        return math.nan
    return (reference - _own_skill(m)) / reference


def _below_z(m: Mapping, yardstick: float, n: float) -> float:
    """How many standard errors the run's accuracy lies below a yardstick's accuracy on `n` examples.

    The run's accuracy is its validation accuracy (its training accuracy where it has no validation); the spread
    is that of two binomial proportions on the yardstick's examples. NaN where either accuracy or the count is
    missing.
    """
    own = _get(m, "final_val_acc")
    own = own if not math.isnan(own) else _get(m, "final_train_acc")
    if math.isnan(yardstick) or math.isnan(own) or not n > 0:
        return math.nan
    spread = (max(yardstick * (1 - yardstick), 1e-4) + max(own * (1 - own), 1e-4)) / n
    return (yardstick - own) / math.sqrt(spread)


def _shortfall_z(m: Mapping) -> float:
    """How many standard errors the run's accuracy lies below the references' on the same validation examples."""
    return _below_z(m, _get(m, "reference_val_acc"), _get(m, "reference_val_examples"))


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


def _copy_skill(m: Mapping) -> float:
    """A clean copy of the run's model scored on validation: its skill above the class prior (NaN: no copy)."""
    if m.get("task") in NO_COPY_YARDSTICK or not _get(m, "capacity_val_examples") > 0:
        return math.nan
    return _skill(_get(m, "capacity_val_score"), prior_baseline(m))


def _copy_gap(m: Mapping) -> float:
    """How much skill the run falls short of a clean copy of its own model by (negative: it beats the copy)."""
    return _copy_skill(m) - _own_skill(m)


def _copy_z(m: Mapping) -> float:
    """How many standard errors the run's accuracy lies below the clean copy's, on the copy's validation examples."""
    if math.isnan(_copy_skill(m)):
        return math.nan
    return _below_z(m, _get(m, "capacity_val_score"), _get(m, "capacity_val_examples"))


def _loss_left(m: Mapping) -> float:
    """The final training loss over the first one (NaN where either is missing or the first is not positive)."""
    first, final = _get(m, "first_loss"), _get(m, "final_train_loss")
    if not (math.isfinite(first) and first > 0) or math.isnan(final):
        return math.nan
    return final / first if math.isfinite(final) else math.inf


def _fit_vs_reference(m: Mapping) -> float:
    """Training accuracy over what the references reach on held-out examples, both above the baseline."""
    baseline = prior_baseline(m)
    room = _get(m, "reference_val_acc") - baseline
    if not room > 0.05:  # the references learned next to nothing: no yardstick
        return math.nan
    return _div(_get(m, "final_train_acc") - baseline, room)


# The share of the logits at a floor (a ReLU or clamp on them) over which a run's logits are read as clamped
# (analysis/checks/outputs.py: clamped_logits, whose threshold this is). Such a model cannot show its capacity:
# whole classes never win, and a wider layer does not help, so the capacity evidence is not read on it.
FLOORED_LOGITS = 0.05


def _capacity_fit(m: Mapping) -> float:
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
    if _get(m, "logit_floor_share") > FLOORED_LOGITS:  # classes that can never win: no capacity evidence
        return math.nan
    baseline, fitted = _get(m, "capacity_baseline"), _get(m, "capacity_score")
    references = [_get(m, "reference_train_acc"), _get(m, "reference_loo_acc")]
    finite = [value for value in references if not math.isnan(value)]
    if math.isnan(fitted) or not finite:
        return math.nan
    room = max(finite) - baseline
    if not room > 0.05:  # the references fit next to nothing beyond the constant answer: no yardstick
        return math.nan
    own = _get(m, "final_train_acc")
    shown = fitted if math.isnan(own) else max(fitted, own)
    return _div(shown - baseline, room)


def _excess_error(train_acc: float, val_acc: float, n_train: float, n_val: float) -> float:
    """How many standard errors the error on the training labels exceeds the error on validation."""
    train_error, val_error = 1 - train_acc, 1 - val_acc
    spread = max(train_error * (1 - train_error), 1e-4) / max(n_train, 1) + max(
        val_error * (1 - val_error), 1e-4
    ) / max(n_val, 1)
    return (train_error - val_error) / math.sqrt(spread)


def _label_noise_z(m: Mapping) -> float:
    """Wrong training labels: the references err more on the training labels than on validation, in standard errors.

    Two yardsticks, the larger counts: 5 nearest neighbours outvoting an example's label (left out) against
    their error on validation, and a ridge classifier's error on its own training examples against validation.
    On clean labels both sit within a couple of standard errors; a hard task raises both errors alike.
    """
    n_train, n_val = _get(m, "reference_examples"), _get(m, "reference_val_examples")
    neighbours = _excess_error(_get(m, "reference_loo_acc"), _get(m, "reference_knn_val_acc"), n_train, n_val)
    linear = _excess_error(_get(m, "reference_train_acc"), _get(m, "reference_linear_val_acc"), n_train, n_val)
    return float(np.fmax(neighbours, linear))


def _data_gain(m: Mapping) -> float:
    """The skill the references are forecast to gain from twice the examples (analysis/data_forecast.py).

    In units of the room above the baseline, like every skill here. NaN without a data learning curve (no
    references: regression, multi-label, inputs whose rows are not the examples).
    """
    made = data_forecast(m.get("data_curve_examples"), m.get("data_curve_val_acc"), _get(m, "reference_val_examples"))
    baseline = prior_baseline(m)
    if made is None or math.isnan(baseline) or baseline >= 1:
        return math.nan
    return made.gain / (1 - baseline)


def _prior_shift(m: Mapping) -> float:
    """The class most under-represented in training, against validation's mix; NaN without validation.

    Without validation nothing tells a problem uneven by nature (most real data) from a training set that lost a
    class: the raw training imbalance is no fault of its own, so the rule is not judged. Nor where that class has
    too few validation examples for its share to mean anything (`too_few_in_class`).
    """
    return math.nan if too_few_in_class(m) else _get(m, "prior_shift")


def _finite_curve(m: Mapping, key: str) -> list[float]:
    values = m.get(key)
    return [float(v) for v in (values if values is not None else []) if v is not None and math.isfinite(v)]


def _val_loss_rise(m: Mapping) -> float:
    """Final validation loss over the lowest one seen: above 1 once validation loss turns back up."""
    curve = _finite_curve(m, "val_loss_curve")
    final = _get(m, "final_val_loss")
    if not curve or not math.isfinite(final) or min(curve) <= 0:
        return math.nan
    return final / min(curve)


def _late_drop_share(m: Mapping) -> float:
    """Share of the training loss's whole fall that came in the run's last stretch: high while still improving.

    The loss is read as medians of tenths of the run (minibatch noise cancels): the first tenth, the tenth that
    ends at 80%, and the last tenth. (80% - end) over (start - end). A run that has flattened out puts next to
    nothing in its last fifth; one stopped while still falling puts a fifth or more. NaN when the loss did not
    fall at all (nothing is improving) or the run is under 10 steps.
    """
    curve = _finite_curve(m, "train_loss_curve")
    n = len(curve)
    if n < 10:
        return math.nan
    w = max(1, n // 10)
    start, end = float(np.median(curve[:w])), float(np.median(curve[-w:]))
    before = float(np.median(curve[n - 3 * w : n - 2 * w]))
    fall = start - end
    if not fall > 0.05 * abs(start):
        return math.nan
    return (before - end) / fall


# The last stretch of a run the "still learning" reading looks at: its last quarter, and never fewer steps than this.
LATE_STEPS = 8


def _late_halves(m: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The run's training loss, and the two halves of its last quarter (at least LATE_STEPS steps); None: too short."""
    curve = np.asarray(_finite_curve(m, "train_loss_curve"), dtype=float)
    late = curve[-max(LATE_STEPS, len(curve) // 4) :]
    if len(late) < LATE_STEPS:
        return None
    return curve, late[: len(late) // 2], late[len(late) // 2 :]


def _late_fall_share(m: Mapping) -> float:
    """The last quarter's fall (as in `_late_fall_z`) over the run's whole fall, from its first quarter's median.

    0 where the loss did not fall over the run at all (nothing is left falling late); NaN under LATE_STEPS steps.
    """
    halves = _late_halves(m)
    if halves is None:
        return math.nan
    curve, first, second = halves
    whole = float(np.median(curve[: max(1, len(curve) // 4)])) - float(np.median(second))
    if not whole > 0:
        return 0.0
    return (float(np.median(first)) - float(np.median(second))) / whole


def _late_fall_z(m: Mapping) -> float:
    """How far the training loss fell across the run's last quarter, in standard errors of that fall; NaN: unread.

    The last quarter (at least LATE_STEPS steps, the whole run if it is shorter) is cut in two halves; the fall is the
    first half's median less the second's. Its standard error: the spread of each step's loss about its half's
    median (1.4826 MAD, so a spike or a bad batch moves nothing) carried to two medians (1.2533 sigma sqrt(1/n1 +
    1/n2)). Read on the run's own noise, so the same on 20 steps and on 20,000: above 2 the run was still learning
    when it stopped (OutcomeGate.still_learning). NaN under LATE_STEPS steps, or where the loss did not vary at all.
    """
    halves = _late_halves(m)
    if halves is None:
        return math.nan
    _, first, second = halves
    return _fall_z(first, second)


# Validation reads in the run's last quarter the still-learning reading needs to read validation rather than the
# training loss: three a half, so that each half's median and spread rest on more than one pass. The grid's cells,
# reading every 50 of 600 steps, have 4 there; the doctor's reads thin out to about 9 (doctor/validation_reads.py).
LATE_VAL_READS = 6


def _late_val_fall_z(m: Mapping) -> float:
    """How far the validation loss fell across the run's last quarter, in standard errors of that fall; NaN: unread.

    As `_late_fall_z`, on the validation reads whose step lies in the last quarter of the run (at or after three
    quarters of the last read's step, the run's end), cut in two halves by count: at least LATE_VAL_READS of them,
    else NaN (and the training loss is read instead: OutcomeGate.still_learning).
    """
    steps, losses = m.get("val_steps"), m.get("val_loss_curve")
    if steps is None or losses is None or not len(steps) or len(steps) != len(losses):
        return math.nan
    read = [(s, v) for s, v in zip(steps, losses, strict=True) if v is not None and math.isfinite(v)]
    if not read:
        return math.nan
    end = read[-1][0]
    late = np.asarray([v for s, v in read if s >= 0.75 * end], dtype=float)
    if len(late) < LATE_VAL_READS:
        return math.nan
    return _fall_z(late[: len(late) // 2], late[len(late) // 2 :])


def _fall_z(first: np.ndarray, second: np.ndarray) -> float:
    """The fall from the first stretch's median to the second's, in standard errors of that fall (see _late_fall_z)."""
    medians = float(np.median(first)), float(np.median(second))
    spread = 1.4826 * float(np.median(np.abs(np.concatenate([first - medians[0], second - medians[1]]))))
    error = 1.2533 * spread * math.sqrt(1 / len(first) + 1 / len(second))
    fall = medians[0] - medians[1]
    if error == 0:
        return math.nan if fall == 0 else math.copysign(math.inf, fall)
    return fall / error


def _forecast_gain(m: Mapping) -> float:
    """How much more of its fall the training loss would make by 4x the steps, as a share of its fall so far.

    Read from a saturating learning curve fitted to the run's own loss (analysis/forecast.py): a run stopped
    while its loss still fell steeply gains a large share, one whose loss has flattened next to nothing. NaN
    under 20 steps, when the loss did not fall, or when no curve fits.
    """
    made = forecast(_finite_curve(m, "train_loss_curve"))
    return math.nan if made is None else made.gain_share(4)


def _steps_without_progress(m: Mapping) -> float:
    """The largest update ratio, times the share of the first loss still left at the end (at most 1).

    A rate too high takes large steps that do not bring the loss down (it diverges, oscillates or kills units); a
    small network at a high rate that converges takes large steps too, and leaves little of its loss. A final
    loss that is NaN or inf counts as no progress at all.
    """
    peak, first, final = _get(m, "update_ratio_peak"), _get(m, "first_loss"), _get(m, "final_train_loss")
    if math.isnan(peak):
        return math.nan
    left = final / first if math.isfinite(final) and math.isfinite(first) and first > 0 else 1.0
    return peak * min(max(left, 0.0), 1.0)


def _output_prob_share(m: Mapping) -> float:
    """The share of output rows that were probabilities, or 0 where the reach probe found rows that do not sum to 1.

    A softmax's rows sum to 1 for any input; two sigmoids' rows do only by chance, as saturated ones often do (one
    near 1, the other near 0). The reach probe (inputs and output layer scaled up 1000x) measures
    `logit_reach_span` only where some row did not sum to 1: then there is no softmax at the end of the model.
    """
    share = _get(m, "output_prob_share")
    return 0.0 if share > 0 and not math.isnan(_get(m, "logit_reach_span")) else share


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
    return float(_get(m, "ln_classes") > math.log(2.5))  # for one-hot rows ln_classes is ln C (regression: a variance)


def _memorize_at_1e3(m: Mapping) -> float:
    rates, losses = m.get("memorize_rates"), m.get("memorize_losses")
    for rate, loss in zip(rates if rates is not None else [], losses if losses is not None else [], strict=False):
        if math.isclose(rate, 1e-3):
            return float(loss)
    return math.nan


@dataclass(frozen=True)
class Feature:
    """One named quantity the rules may read, and the record columns it is computed from.

    `reads` is checked against the record's columns when the feature is built (an unknown name raises at import,
    naming the nearest columns), and `compute` sees only those columns: reading one it does not declare raises,
    where it would otherwise read a silent NaN.
    """

    name: str
    sentence: str
    normalized_by: str
    log: bool
    compute: Callable[[Mapping], float]
    reads: tuple[str, ...] = ()

    def __post_init__(self):
        for column in self.reads:
            if column not in COLUMN_NAMES:
                near = difflib.get_close_matches(column, sorted(COLUMN_NAMES), n=5)
                raise ValueError(
                    f"feature {self.name} reads {column!r}, which is no record column; nearest: {', '.join(near)}"
                )

    def of(self, measurements: Mapping) -> float:
        """The feature of one run's measurements, computed on its declared columns alone."""
        return float(self.compute(_Declared(measurements, self)))


class _Declared(Mapping):
    """A run's measurements as one feature may read them: its declared columns, and no other."""

    __slots__ = ("_feature", "_measurements")

    def __init__(self, measurements: Mapping, feature: Feature):
        self._measurements, self._feature = measurements, feature

    def _check(self, key: str) -> None:
        if key not in self._feature.reads:
            raise KeyError(
                f"feature {self._feature.name} reads {key!r}, which it does not declare (reads="
                f"{self._feature.reads}): add it to the feature's reads"
            )

    def __getitem__(self, key: str):
        self._check(key)
        return self._measurements[key]

    def get(self, key: str, default=None):
        self._check(key)
        return self._measurements.get(key, default)

    def __contains__(self, key) -> bool:
        self._check(key)
        return key in self._measurements

    def __iter__(self):
        return (key for key in self._feature.reads if key in self._measurements)

    def __len__(self) -> int:
        return sum(1 for _ in self)


FEATURES_LIST = [
    Feature(
        "data_wait_ratio",
        "seconds waiting for batches per second of the loop's own compute",
        "the loop's own compute time: a wait that is long for a tiny MLP step is nothing for a big model's",
        True,
        _wait_ratio,
        reads=("data_wait_s", "loop_s"),
    ),
    Feature(
        "no_grad_share",
        "share of parameter elements that never got a gradient",
        "the parameter count: any model size",
        False,
        lambda m: _get(m, "params_without_grad_share"),
        reads=("params_without_grad_share",),
    ),
    Feature(
        "grad_carried_share",
        "share of optimizer steps whose next backward found .grad not cleared",
        "the optimizer steps: read from hooks, whatever the loss's scaling or the batches per step",
        False,
        lambda m: _get(m, "grad_carried_share"),
        reads=("grad_carried_share",),
    ),
    Feature(
        "grad_kept_at_step",
        "gradient norm at the optimizer step over its norm after backward (unscaled), median over steps",
        "the gradient's own norm after backward: 1 exactly when nothing clips it, whatever its size",
        True,
        lambda m: _get(m, "grad_kept_at_step"),
        reads=("grad_kept_at_step",),
    ),
    Feature(
        "lr_peak_share",
        "the highest rate an optimizer step used, over the rate the optimizer was built with",
        "the optimizer's own rate (a scheduler's initial_lr): 1 exactly without a schedule, whatever the rate",
        True,
        lambda m: _get(m, "lr_peak_share"),
        reads=("lr_peak_share",),
    ),
    Feature(
        "lr_decayed_share",
        "share of optimizer steps run at under 5% of the highest rate a step had used before them",
        "the run's own peak rate and its optimizer steps: any rate, any schedule, any length",
        False,
        lambda m: _get(m, "lr_decayed_share"),
        reads=("lr_decayed_share",),
    ),
    Feature(
        "weight_norm_ratio",
        "joint norm of the weight matrices at the last measured step over their norm at the first",
        "the weights' own starting norm: any width, depth or initialization",
        True,
        lambda m: _get(m, "weight_norm_ratio"),
        reads=("weight_norm_ratio",),
    ),
    Feature(
        "unmoved_share",
        "share of parameter elements with a gradient that no measured optimizer step moved",
        "the parameter count: any model size (only parameters that got a gradient are read)",
        False,
        lambda m: _get(m, "unmoved_share"),
        reads=("unmoved_share",),
    ),
    Feature(
        "targets_changed_share",
        "share of target rows the loss received that differ from the rows the batch handed over",
        "the rows compared: any batch size (read as labels: an encoding change is not a change)",
        False,
        lambda m: _get(m, "targets_changed_share"),
        reads=("targets_changed_share",),
    ),
    Feature(
        "accumulation_ratio",
        "norm of .grad over the norm of a fresh gradient of the same loss",
        "a fresh gradient of the same loss on the same batch: 1 exactly when .grad holds this step's gradient",
        True,
        lambda m: _get(m, "accumulation_ratio"),
        reads=("accumulation_ratio",),
    ),
    Feature(
        "wrong_mode_share",
        "share of training (evaluation) forwards run in eval (training) mode",
        "the forwards counted (only in models with dropout or BatchNorm, where the mode matters)",
        False,
        lambda m: np.fmax(_get(m, "train_in_eval_share"), _get(m, "eval_in_train_share")),
        reads=("eval_in_train_share", "train_in_eval_share"),
    ),
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
        lambda m: _get(m, "logit_reach_span"),
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
        lambda m: _get(m, "output_spread"),
        reads=("output_spread",),
    ),
    Feature(
        "target_reach_gap",
        "share of the targets outside what the output can produce, with the inputs scaled up to 1000x",
        "the targets themselves (a share): only for targets shaped like the output, not class indices",
        False,
        lambda m: _get(m, "target_reach_gap"),
        reads=("target_reach_gap",),
    ),
    Feature(
        "late_drop_share",
        "share of the training loss's whole fall that came in the run's last fifth",
        "the run's own fall and length: the same share on a 20-step and a 20 000-step run",
        False,
        _late_drop_share,
        reads=("train_loss_curve",),
    ),
    Feature(
        "late_fall_z",
        "the training loss's fall across the run's last quarter (two halves' medians), in standard errors",
        "the run's own step-to-step noise in that stretch: the same reading on a 20-step and a 20 000-step run",
        False,
        _late_fall_z,
        reads=("train_loss_curve",),
    ),
    Feature(
        "late_val_fall_z",
        "the validation loss's fall across the run's last quarter (two halves' medians), in standard errors; NaN"
        " under 6 validation reads there",
        "the run's own read-to-read noise in that stretch: the same reading on any run length",
        False,
        _late_val_fall_z,
        reads=("val_steps", "val_loss_curve"),
    ),
    Feature(
        "late_fall_share",
        "the training loss's fall across the run's last quarter over its whole fall (0: it never fell)",
        "the run's own fall: a share, the same on any loss and run length",
        False,
        _late_fall_share,
        reads=("train_loss_curve",),
    ),
    Feature(
        "forecast_gain",
        "more of the training loss's fall forecast by 4x the steps, as a share of its fall so far",
        "the run's own fall and length: a share of what it has already gained, on any loss and run length",
        False,
        _forecast_gain,
        reads=("train_loss_curve",),
    ),
    Feature(
        "input_rms",
        "root mean square of the inputs",
        "the unit scale of standardized features, the scale every initialization assumes",
        True,
        lambda m: _get(m, "input_rms"),
        reads=("input_rms",),
    ),
    Feature(
        "loss_under_compressor",
        "the lower of the final training and validation losses over lzma's rate on the validation text (nats per byte)",
        "a compressor's rate on the same text: what the text allows, for any text and vocabulary of bytes",
        True,
        _loss_under_compressor,
        reads=("final_train_loss", "final_val_loss", "lm_compressor_val_loss"),
    ),
    Feature(
        "loss_over_counts",
        "the final validation loss (else training) over the better of the unigram and bigram counts' on the same"
        " text (the outcome gate's measurement on next-token tasks)",
        "counts of each token and of which token follows which on the training text: what a table reaches, any text",
        True,
        _loss_over_counts,
        reads=("final_val_loss", "final_train_loss", "lm_bigram_val_loss", "lm_unigram_val_loss"),
    ),
    Feature(
        "counts_noise",
        "the token counts' validation loss's standard error over that loss (the sampling error of loss_over_counts)",
        "the counts' own validation loss",
        True,
        _counts_noise,
        reads=("lm_bigram_val_loss", "lm_counts_val_se", "lm_unigram_val_loss"),
    ),
    Feature(
        "first_loss_ratio",
        "first loss over ln C",
        "ln C, the loss of a uniform guess",
        True,
        lambda m: _div(_get(m, "first_loss"), _get(m, "ln_classes")),
        reads=("first_loss", "ln_classes"),
    ),
    Feature(
        "dead_at_init",
        "share of ReLU units never active at initialization",
        "the ReLU units on a probe batch: any width and depth",
        False,
        lambda m: _get(m, "dead_unit_share_init"),
        reads=("dead_unit_share_init",),
    ),
    Feature(
        "activation_growth",
        "RMS of the last activations over the first ones', at initialization",
        "the first activations' RMS: growth through depth, whatever the input scale",
        True,
        lambda m: _get(m, "activation_growth_init"),
        reads=("activation_growth_init",),
    ),
    Feature(
        "grad_depth_ratio",
        "gradient norm of the first weight matrix over the last one's, at initialization",
        "the last weight matrix's gradient: whatever the loss scale",
        True,
        lambda m: _get(m, "grad_depth_ratio_init"),
        reads=("grad_depth_ratio_init",),
    ),
    Feature(
        "saturated_at_init",
        "share of tanh/sigmoid outputs within 1% of their bounds, at initialization",
        "the tanh/sigmoid outputs on a probe batch",
        False,
        lambda m: _get(m, "saturated_share_init"),
        reads=("saturated_share_init",),
    ),
    Feature(
        "batch_label_mix",
        "mean entropy of each batch's labels over that of batches drawn at random from the labels seen",
        "a shuffled batch of the same size from the same labels: 1 for shuffled data, whatever the class mix",
        False,
        lambda m: _get(m, "batch_label_mix"),
        reads=("batch_label_mix",),
    ),
    Feature(
        "label_imbalance",
        "most frequent over least frequent training class",
        "the rarest class's count",
        True,
        lambda m: _get(m, "label_imbalance"),
        reads=("label_imbalance",),
    ),
    Feature(
        "prior_shift",
        "the class most under-represented in training: its validation share over its training share",
        "validation's class mix: a problem that is uneven by nature is uneven in validation too (without"
        " validation: not judged)",
        True,
        _prior_shift,
        reads=("prior_shift", "prior_shift_class_examples"),
    ),
    Feature(
        "periodic_spike_share",
        "loss spikes at the most common interval, over the number that interval fits in the run",
        "the run's length: a rarer bad batch leaves fewer spikes, but as large a share of the ones it can",
        False,
        _periodic_share,
        reads=("loss_spike_period", "periodic_spikes", "steps"),
    ),
    Feature(
        "update_ratio_peak",
        "largest per-step median, over the weight matrices, of update norm over weight norm",
        "the weights' own size: reads the step the optimizer takes, whatever its kind",
        True,
        lambda m: _get(m, "update_ratio_peak"),
        reads=("update_ratio_peak",),
    ),
    Feature(
        "steps_without_progress",
        "largest per-step median update ratio of the weight matrices times the share of the first loss left at the end",
        "the weights' own size and the run's own first loss: large steps that brought the loss down are no fault",
        True,
        _steps_without_progress,
        reads=("final_train_loss", "first_loss", "update_ratio_peak"),
    ),
    Feature(
        "update_ratio",
        "median of update norm over weight norm per step, over the weight matrices",
        "the weights' own size",
        True,
        lambda m: _get(m, "update_ratio_median"),
        reads=("update_ratio_median",),
    ),
    Feature(
        "val_skill",
        "validation accuracy above the baseline, as a share of the room above it",
        "the class prior (always answering the most frequent training label)",
        False,
        lambda m: _skill(_get(m, "final_val_acc"), prior_baseline(m)),
        reads=("baseline_val_acc", "final_val_acc", "majority_share"),
    ),
    Feature(
        "reference_skill",
        "the references' validation accuracy above the baseline, as a share of the room above it",
        "the class prior",
        False,
        lambda m: _skill(_get(m, "reference_val_acc"), prior_baseline(m)),
        reads=("baseline_val_acc", "majority_share", "reference_val_acc"),
    ),
    Feature(
        "own_skill",
        "the run's skill in its task's metric (validation, else training): accuracy above the class prior as a"
        " share of the room above it; R² for regression",
        "the class prior (R²: always predicting the mean)",
        False,
        _own_skill,
        reads=("baseline_val_acc", "final_train_acc", "final_val_acc", "majority_share", "task"),
    ),
    Feature(
        "skill_shortfall",
        "the share of the references' validation skill the run's own skill falls short of (the outcome gate's"
        " measurement)",
        "a quick reference fit on the same data: what this task allows, hard or easy (0: as good, 1: learned nothing)",
        False,
        _skill_shortfall,
        reads=("baseline_val_acc", "final_train_acc", "final_val_acc", "majority_share", "reference_val_acc", "task"),
    ),
    Feature(
        "shortfall_z",
        "how many standard errors the run's accuracy lies below the references' on the same validation examples",
        "the sampling error of both accuracies on that many examples: a few points are nothing on 50 examples",
        False,
        _shortfall_z,
        reads=("final_train_acc", "final_val_acc", "reference_val_acc", "reference_val_examples"),
    ),
    Feature(
        "copy_skill",
        "a clean copy of the run's model (the capacity fit's fresh copy: Adam, full batch, up to 1024 training"
        " examples) scored on validation: accuracy above the baseline, as a share of the room above it",
        "the class prior",
        False,
        _copy_skill,
        reads=("baseline_val_acc", "capacity_val_examples", "capacity_val_score", "majority_share", "task"),
    ),
    Feature(
        "copy_gap",
        "the clean copy's validation skill less the run's own (the outcome gate's second measurement)",
        "the same model on the same data in a clean loop: what this model reaches here, whatever the references can",
        False,
        _copy_gap,
        reads=COPY_GAP_READS,
    ),
    Feature(
        "copy_z",
        "how many standard errors the run's accuracy lies below the clean copy's on the copy's validation examples",
        "the sampling error of both accuracies on that many examples",
        False,
        _copy_z,
        reads=COPY_GAP_READS,
    ),
    Feature(
        "loss_left",
        "final training loss over the first one",
        "the run's own first loss",
        False,
        _loss_left,
        reads=("final_train_loss", "first_loss"),
    ),
    Feature(
        "learnable_skill",
        "the better of the model's and the references' validation skill",
        "the class prior (not 1/C: a 2-class problem cannot reach 4.5x chance); the references vouch for a"
        " learnable task that a broken model does not learn",
        False,
        _learnable,
        reads=("baseline_val_acc", "final_val_acc", "majority_share", "reference_val_acc", "task"),
    ),
    Feature(
        "fit_vs_reference",
        "training accuracy above the baseline over the references' validation accuracy above it",
        "a quick reference fit on the same data: what is reachable on this task, hard or easy",
        False,
        _fit_vs_reference,
        reads=("baseline_val_acc", "final_train_acc", "majority_share", "reference_val_acc"),
    ),
    Feature(
        "capacity_fit",
        "what the model has shown it fits of the training examples (the better of a fresh copy's fit of up to 1024"
        " of them in a clean loop, Adam, full batch, and the run's own training score), over what quick"
        " references fit of them, both above the best constant answer",
        "the references' fit of the training examples (a ridge classifier's training accuracy or 5-NN's"
        " leave-one-out, the better; none without a reference): noisy classes hold both down, a model"
        " with room to spare fits at least as much, one too small for the data less, however it is trained",
        False,
        _capacity_fit,
        reads=(
            "capacity_baseline",
            "capacity_score",
            "final_train_acc",
            "logit_floor_share",
            "reference_loo_acc",
            "reference_train_acc",
        ),
    ),
    Feature(
        "label_noise_z",
        "how many standard errors quick references err more on the training labels than on validation",
        "the references' own error on validation and its sampling error: a hard task errs on both alike, wrong"
        " training labels on one",
        False,
        _label_noise_z,
        reads=(
            "reference_examples",
            "reference_knn_val_acc",
            "reference_linear_val_acc",
            "reference_loo_acc",
            "reference_train_acc",
            "reference_val_examples",
        ),
    ),
    Feature(
        "train_val_gap",
        "training minus validation accuracy at the end",
        "the run's own validation accuracy: the gap between what it fits and what it generalizes",
        False,
        lambda m: _get(m, "final_train_acc") - _get(m, "final_val_acc"),
        reads=("final_train_acc", "final_val_acc"),
    ),
    Feature(
        "data_gain",
        "validation skill quick references are forecast to gain from twice the training examples",
        "the room above the baseline, on the run's own data learning curve (the references refitted on shares of"
        " its examples)",
        False,
        _data_gain,
        reads=(
            "baseline_val_acc",
            "data_curve_examples",
            "data_curve_val_acc",
            "majority_share",
            "reference_val_examples",
        ),
    ),
    Feature(
        "val_loss_rise",
        "final validation loss over the lowest one seen",
        "the run's own best validation loss",
        True,
        _val_loss_rise,
        reads=("final_val_loss", "val_loss_curve"),
    ),
]
# The raw readings of the first, hand-set rules (analysis.rules.NAIVE_RULES), kept for comparison: they move with
# the task and the loop, which is why the fitted rules read the normalized features above instead.
NAIVE_FEATURES_LIST = [
    Feature(
        "data_wait_share",
        "share of the loop spent waiting for batches",
        "nothing",
        False,
        lambda m: _get(m, "data_wait_share"),
        reads=("data_wait_share",),
    ),
    Feature(
        "val_acc_x_chance",
        "validation accuracy over chance (1/C)",
        "1/C",
        False,
        lambda m: _get(m, "final_val_acc") * _get(m, "n_classes"),
        reads=("final_val_acc", "n_classes"),
    ),
    Feature(
        "train_acc",
        "final training accuracy",
        "nothing",
        False,
        lambda m: _get(m, "final_train_acc"),
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
FEATURES_LIST += NAIVE_FEATURES_LIST
FEATURES = {f.name: f for f in FEATURES_LIST}


# The quick references' columns (harness/reference.py declares them): a feature that reads one rests on them.
REFERENCE_COLUMNS = frozenset(name for name, where in DECLARED_IN.items() if where == "harness/reference.py")
RESTS_ON_REFERENCES = frozenset(f.name for f in FEATURES_LIST if REFERENCE_COLUMNS.intersection(f.reads))
# The fewest held-out examples the references may be scored on for a feature to rest on them. An accuracy on n
# examples has a standard error of up to 0.5 / sqrt(n): 9 points at 30, wider than most shortfalls the rules weigh,
# and a 5-NN vote fitted on a handful of examples says nothing (a batch-1 loop whose few kept examples leave 3 to
# score on). Below it those features are not judged (NaN), and the doctor says so; every problem of the grid and
# the zoo holds 50 or more.
REFERENCE_FLOOR = 30


def too_few_for_references(measurements: Mapping) -> str | None:
    """Why the features resting on the quick references are not judged on this run (None: they are).

    The floor reads the distinct held-out examples: forty rows that are eight examples repeated are eight draws.
    A record from before the distinct rows were counted (schema 24) is read on its examples alone.
    """
    held_out = _get(measurements, "reference_val_examples")
    distinct = _get(measurements, "reference_val_distinct")
    if 0 < held_out < REFERENCE_FLOOR:
        return (
            f"the quick references were scored on {held_out:.0f} held-out examples, fewer than {REFERENCE_FLOOR}: too"
            " few to tell a shortfall from noise"
        )
    if 0 < distinct < REFERENCE_FLOOR:
        return (
            f"the quick references were scored on {held_out:.0f} held-out examples, {distinct:.0f} of them distinct,"
            f" fewer than {REFERENCE_FLOOR}: too few to tell a shortfall from noise"
        )
    return None


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
    count = _get(measurements, "prior_shift_class_examples")
    if 0 < count < PER_CLASS_FLOOR:
        return (
            f"the class it reads has {count:.0f} validation examples, fewer than {PER_CLASS_FLOOR}: too few to tell"
            " a shifted class mix from chance"
        )
    return None


def features(measurements: Mapping) -> dict[str, float]:
    """The named features of one run's measurements (NaN where a measurement is missing).

    Those resting on the quick references are NaN where the references were scored on too few examples
    (`too_few_for_references`).
    """
    values = {f.name: f.of(measurements) for f in FEATURES_LIST}
    if too_few_for_references(measurements) is not None:
        values.update(dict.fromkeys(RESTS_ON_REFERENCES, math.nan))
    return values


def feature_table(records: "pd.DataFrame") -> "pd.DataFrame":
    """`features` of every record, one row each, same index."""
    import pandas as pd

    rows = [features(m) for m in records.to_dict("records")]
    return pd.DataFrame(rows, index=records.index, columns=list(FEATURES)).astype(float)


def budgets_of(records: "pd.DataFrame") -> list[int]:
    """Every step budget some record passed through (a snapshot before its end), and the longest run's end.

    A run cut short on purpose (still_improving stops at 20, 60 or 150 steps) ends at its own length: that is
    no budget the grid's runs were measured at, so it makes none (its snapshots at the grid's budgets count).
    """
    found, ends = set(), set()
    for snapshots in records.get("checkpoints", ()):
        steps = sorted(int(s["steps"]) for s in _list(snapshots))
        found.update(steps[:-1])
        ends.update(steps[-1:])
    return sorted(found | ({max(ends)} if ends else set()))


def _list(value) -> list:
    return [] if value is None else list(value)


def at_budget(records: "pd.DataFrame", steps: int) -> "pd.DataFrame":
    """The records as they were after `steps` training steps: records that never got there are left out.

    The snapshot's measurements replace the record's own, and the curves are cut at that step.
    """
    import pandas as pd

    rows, index = [], []
    for key, record in zip(records.index, records.to_dict("records"), strict=True):
        snapshot = next((s for s in _list(record.get("checkpoints")) if s["steps"] == steps), None)
        if snapshot is None:
            continue
        cut = {**record, **{k: snapshot[k] for k in CHECKPOINT_COLUMNS if k in snapshot}}
        val_steps = _list(record.get("val_steps"))
        keep = [i for i, s in enumerate(val_steps) if s <= steps]
        for curve in ("val_loss_curve", "val_acc_curve"):
            values = _list(record.get(curve))
            cut[curve] = [values[i] for i in keep if i < len(values)]
        cut["val_steps"] = [val_steps[i] for i in keep]
        cut["train_loss_curve"] = _list(record.get("train_loss_curve"))[:steps]
        rows.append(cut)
        index.append(key)
    return pd.DataFrame(rows, index=index, columns=records.columns)
