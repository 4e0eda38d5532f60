"""The formulas that read the run's loss curves into one number each: still learning, stopped, or turned.

Each reads the run's own fall, noise and length, so that the same reading means the same on 20 steps and on
20,000: how far the loss fell across its last quarter in standard errors of its own noise (the outcome gate's
still-learning reading, analysis/outcome_gate.py), how much more a fitted learning curve forecasts
(analysis/forecast.py, for `still_improving`), what share of its first loss is left, whether validation turned up.
Their declarations are in analysis/declarations/.
"""

import math
from collections.abc import Mapping

import numpy as np

from analysis.feature import column, finite_curve
from analysis.forecast import forecast


def loss_left(m: Mapping) -> float:
    """The final training loss over the first one (NaN where either is missing or the first is not positive)."""
    first, final = column(m, "first_loss"), column(m, "final_train_loss")
    if not (math.isfinite(first) and first > 0) or math.isnan(final):
        return math.nan
    return final / first if math.isfinite(final) else math.inf


def val_loss_rise(m: Mapping) -> float:
    """Final validation loss over the lowest one seen: above 1 once validation loss turns back up."""
    curve = finite_curve(m, "val_loss_curve")
    final = column(m, "final_val_loss")
    if not curve or not math.isfinite(final) or min(curve) <= 0:
        return math.nan
    return final / min(curve)


def late_drop_share(m: Mapping) -> float:
    """Share of the training loss's whole fall that came in the run's last stretch: high while still improving.

    The loss is read as medians of tenths of the run (minibatch noise cancels): the first tenth, the tenth that
    ends at 80%, and the last tenth. (80% - end) over (start - end). A run that has flattened out puts next to
    nothing in its last fifth; one stopped while still falling puts a fifth or more. NaN when the loss did not
    fall at all (nothing is improving) or the run is under 10 steps.
    """
    curve = finite_curve(m, "train_loss_curve")
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


def late_halves(m: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The run's training loss, and the two halves of its last quarter (at least LATE_STEPS steps); None: too short."""
    curve = np.asarray(finite_curve(m, "train_loss_curve"), dtype=float)
    late = curve[-max(LATE_STEPS, len(curve) // 4) :]
    if len(late) < LATE_STEPS:
        return None
    return curve, late[: len(late) // 2], late[len(late) // 2 :]


def late_fall_share(m: Mapping) -> float:
    """The last quarter's fall (as in `late_fall_z`) over the run's whole fall, from its first quarter's median.

    0 where the loss did not fall over the run at all (nothing is left falling late); NaN under LATE_STEPS steps.
    """
    halves = late_halves(m)
    if halves is None:
        return math.nan
    curve, first, second = halves
    whole = float(np.median(curve[: max(1, len(curve) // 4)])) - float(np.median(second))
    if not whole > 0:
        return 0.0
    return (float(np.median(first)) - float(np.median(second))) / whole


def late_fall_z(m: Mapping) -> float:
    """How far the training loss fell across the run's last quarter, in standard errors of that fall; NaN: unread.

    The last quarter (at least LATE_STEPS steps, the whole run if it is shorter) is cut in two halves; the fall is the
    first half's median less the second's. Its standard error: the spread of each step's loss about its half's
    median (1.4826 MAD, so a spike or a bad batch moves nothing) carried to two medians (1.2533 sigma sqrt(1/n1 +
    1/n2)). Read on the run's own noise, so the same on 20 steps and on 20,000: above 2 the run was still learning
    when it stopped (OutcomeGate.still_learning). NaN under LATE_STEPS steps, or where the loss did not vary at all.
    """
    halves = late_halves(m)
    if halves is None:
        return math.nan
    _, first, second = halves
    return fall_z(first, second)


# Validation reads in the run's last quarter the still-learning reading needs to read validation rather than the
# training loss: three a half, so that each half's median and spread rest on more than one pass. The grid's cells,
# reading every 50 of 600 steps, have 4 there; the doctor's reads thin out to about 9 (doctor/validation_reads.py).
LATE_VAL_READS = 6


def late_val_fall_z(m: Mapping) -> float:
    """How far the validation loss fell across the run's last quarter, in standard errors of that fall; NaN: unread.

    As `late_fall_z`, on the validation reads whose step lies in the last quarter of the run (at or after three
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
    return fall_z(late[: len(late) // 2], late[len(late) // 2 :])


def fall_z(first: np.ndarray, second: np.ndarray) -> float:
    """The fall from the first stretch's median to the second's, in standard errors of that fall (see late_fall_z)."""
    medians = float(np.median(first)), float(np.median(second))
    spread = 1.4826 * float(np.median(np.abs(np.concatenate([first - medians[0], second - medians[1]]))))
    error = 1.2533 * spread * math.sqrt(1 / len(first) + 1 / len(second))
    fall = medians[0] - medians[1]
    if error == 0:
        return math.nan if fall == 0 else math.copysign(math.inf, fall)
    return fall / error


def forecast_gain(m: Mapping) -> float:
    """How much more of its fall the training loss would make by 4x the steps, as a share of its fall so far.

    Read from a saturating learning curve fitted to the run's own loss (analysis/forecast.py): a run stopped
    while its loss still fell steeply gains a large share, one whose loss has flattened next to nothing. NaN
    under 20 steps, when the loss did not fall, or when no curve fits.
    """
    made = forecast(finite_curve(m, "train_loss_curve"))
    return math.nan if made is None else made.gain_share(4)


def steps_without_progress(m: Mapping) -> float:
    """The largest update ratio, times the share of the first loss still left at the end (at most 1).

    A rate too high takes large steps that do not bring the loss down (it diverges, oscillates or kills units); a
    small network at a high rate that converges takes large steps too, and leaves little of its loss. A final
    loss that is NaN or inf counts as no progress at all.
    """
    peak, first, final = column(m, "update_ratio_peak"), column(m, "first_loss"), column(m, "final_train_loss")
    if math.isnan(peak):
        return math.nan
    left = final / first if math.isfinite(final) and math.isfinite(first) and first > 0 else 1.0
    return peak * min(max(left, 0.0), 1.0)


def periodic_share(m: Mapping) -> float:
    """Spikes at the common period, as a share of the spikes that period would put in the run (needs 3 or more)."""
    period, gaps, steps = column(m, "loss_spike_period"), column(m, "periodic_spikes"), column(m, "steps")
    if math.isnan(gaps) or gaps < 2 or not period > 0 or not steps > 0:
        return 0.0
    return (gaps + 1) / max(steps / period, 1.0)
