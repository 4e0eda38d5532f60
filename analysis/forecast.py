"""Would longer training help? A saturating learning curve fitted to the run's own training loss, carried forward.

The training loss is the one curve every run has at every step (the doctor validates only at the start and the
end; the grid every 50 steps, three points at 100 steps), so the forecast reads it. It is first summarized as
the medians of BINS equal stretches of the run (minibatch noise and spikes cancel), then fitted with each form
of FORMS, each a floor the loss approaches and a fall towards it:

    power law     L(t) = floor + scale * (1 + t / span) ** -rate
    exponential   L(t) = floor + scale * exp(-t / span)

and carried to 2x and 4x the run's steps. Which form is used (FORM) was chosen by `python -m analysis forecast
runs/zoo`: zoo runs (digits and the generated problems) cut at 50, 100 and 200 steps, each forecast scored
against the run's own continuation (docs/results.md has the figures). The interval is the fit's own standard
error at that step (the parameters' covariance carried through the curve), widened by INTERVAL_SCALE, the
factor that made the zoo's 90% intervals cover 90% of the continuations (measured by the same command).

A Forecast says how much of the fall so far the longer run adds (`gain_share`): the feature `forecast_gain`
(analysis/loss_curves.py), which `still_improving` reads. A run whose loss has flattened adds next to nothing; a
run stopped while its loss still fell steeply adds a large share.
"""

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BINS = 20  # medians of this many stretches of the run are fitted (fewer when the run is short)
MIN_STEPS = 20  # a shorter curve has too few points to fit a floor, a scale, a span and a rate
MULTIPLES = (2, 4)  # the forecasts: at 2x and 4x the run's steps
Z_90 = 1.645  # a two-sided 90% interval of a normal error


def _power(t, floor, scale, span, rate):
    return floor + scale * np.power(1.0 + t / span, -rate)


def _exponential(t, floor, scale, span):
    return floor + scale * np.exp(-t / span)


FORMS = {"power": _power, "exponential": _exponential}
FORM = "power"  # chosen on the zoo (module docstring): the smaller error; `python -m analysis forecast` prints both
INTERVAL_SCALE = 1.41  # the power law's standard error widened to cover 90% of the zoo's continuations (`scale`)


@dataclass(frozen=True)
class Forecast:
    """The training loss a run would reach if it went on: at each of MULTIPLES x its steps, a value and a 90% range.

    The range is shown inside what the loss can be: never above where the run stands now (the forecast never is,
    nor any curve of its form), and never below 0 for a loss that never went below 0 in the run (cross-entropy,
    squared error: `nonnegative`). A fit's error carried to twice the steps is often wider than the loss itself
    ("0.166 +- 9" on a loss of 1.05), which said nothing a reader could use.
    """

    form: str
    steps: int
    first: float  # the loss of the first stretch (a median)
    now: float  # the loss of the last stretch (a median): where the run stands
    at: dict[int, tuple[float, float]]  # steps -> (forecast loss, half-width of its 90% interval)
    nonnegative: bool = True  # no loss of the run was below 0: the range stops at 0

    def gain_share(self, multiple: int = 4) -> float:
        """The fall from now to `multiple` x the steps, as a share of the fall so far (NaN when nothing fell)."""
        fall = self.first - self.now
        if not fall > 0:
            return math.nan
        value, _ = self.at[multiple * self.steps]
        return max(self.now - value, 0.0) / fall

    def range_at(self, steps: int) -> tuple[float, float]:
        """The 90% range of the forecast at `steps`, held inside what the loss can be (the class docstring)."""
        value, half = self.at[steps]
        low = value - half
        return (max(low, 0.0) if self.nonnegative else low), min(value + half, self.now)

    def _said(self, steps: int) -> str:
        low, high = self.range_at(steps)
        return f"{self.at[steps][0]:.3g} ({low:.2g} to {high:.2g})"

    def line(self, multiple: int = 2) -> str:
        """`training loss at 2x the steps (400): 0.31 (0.27 to 0.35), now 0.45`, for the report."""
        steps = multiple * self.steps
        return f"training loss at {multiple}x the steps ({steps}): {self._said(steps)}, now {self.now:.3g}"

    def summary(self) -> str:
        """Every forecast in one line: `training loss now 0.45; at 2x the steps (400) 0.31 (0.27 to 0.35); ...`."""
        parts = [f"training loss now {self.now:.3g}"]
        for steps in self.at:
            parts.append(f"at {steps // self.steps}x the steps ({steps}) {self._said(steps)}")
        return "; ".join(parts) + " (90% ranges)"


def smoothed(curve: Sequence[float], bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """The curve's medians over `bins` equal stretches, at each stretch's middle step (steps count from 1)."""
    values = np.asarray(curve, dtype=float)
    edges = np.linspace(0, len(values), min(bins, len(values) // 2) + 1).round().astype(int)
    steps = np.array([(lo + hi + 1) / 2 for lo, hi in itertools.pairwise(edges)])
    medians = np.array([np.median(values[lo:hi]) for lo, hi in itertools.pairwise(edges)])
    return steps, medians


def _fit(form: str, steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The form's parameters fitted to (steps, values) and their covariance, or None when the fit fails."""
    from scipy.optimize import curve_fit  # here, not at the top: `import doctor` should not load scipy

    low = 0.0 if values.min() >= 0 else -np.inf  # a loss that cannot go negative has a floor of at least 0
    top = float(values.max())
    fall = max(float(values[0] - values[-1]), 1e-12)
    if form == "power":
        start = (float(values[-1]) - fall * 0.1, fall * 2, float(steps[-1]) / 3, 1.0)
        bounds = ([low, 0.0, 1e-3, 1e-3], [top, np.inf, float(steps[-1]) * 100, 10.0])
    else:
        start = (float(values[-1]), fall * 2, float(steps[-1]) / 3)
        bounds = ([low, 0.0, 1e-3], [top, np.inf, float(steps[-1]) * 100])
    start = tuple(float(np.clip(s, lo, hi)) for s, lo, hi in zip(start, *bounds, strict=True))
    try:
        params, covariance = curve_fit(FORMS[form], steps, values, p0=start, bounds=bounds, maxfev=5000)
    except (RuntimeError, ValueError):
        return None
    return params, covariance


def _standard_error(form: str, params: np.ndarray, covariance: np.ndarray, t: float) -> float:
    """The fitted curve's standard error at step t: its gradient in the parameters through their covariance."""
    if not np.all(np.isfinite(covariance)):
        return math.inf
    gradient = np.empty(len(params))
    for i, p in enumerate(params):
        h = 1e-6 * max(abs(p), 1e-6)
        up, down = params.copy(), params.copy()
        up[i], down[i] = p + h, p - h
        gradient[i] = (FORMS[form](t, *up) - FORMS[form](t, *down)) / (2 * h)
    return float(math.sqrt(max(gradient @ covariance @ gradient, 0.0)))


def finite_losses(curve: Sequence[float] | None) -> list[float]:
    """The curve's finite values, in order (none for a missing curve)."""
    return [float(v) for v in (curve if curve is not None else []) if v is not None and math.isfinite(v)]


def forecast(
    curve: Sequence[float] | None, form: str = FORM, interval_scale: float = INTERVAL_SCALE
) -> Forecast | None:
    """The run's training loss carried to MULTIPLES x its steps; None when the curve is too short or will not fit.

    `curve` is the training loss at every step (non-finite values are left out; None: no curve). The forecast
    never goes above where the run stands now: a learning curve that rises again is no curve of this kind. The
    same curve is fitted once: the analysis reads each record's features again for every problem it leaves out.
    """
    if form not in FORMS:
        raise ValueError(f"unknown learning-curve form {form!r}: choose from {', '.join(FORMS)}")
    values = np.array(finite_losses(curve), dtype=float)
    if len(values) < MIN_STEPS:
        return None
    return _forecast(values.tobytes(), form, interval_scale)


@functools.lru_cache(maxsize=65536)
def _forecast(raw: bytes, form: str, interval_scale: float) -> Forecast | None:
    values = np.frombuffer(raw, dtype=float)
    steps, medians = smoothed(values)
    fitted = _fit(form, steps, medians)
    if fitted is None:
        return None
    params, covariance = fitted
    n, now = len(values), float(medians[-1])
    at = {}
    for multiple in MULTIPLES:
        t = float(multiple * n)
        value = min(float(FORMS[form](t, *params)), now)
        half = Z_90 * interval_scale * _standard_error(form, params, covariance, t)
        at[multiple * n] = (value, half)
    return Forecast(form=form, steps=n, first=float(medians[0]), now=now, at=at, nonnegative=bool(values.min() >= 0))


# The study: how well the forecast carries a run forward, measured on runs that went on (`python -m analysis
# forecast runs/zoo`). Only digits and generated problems: the zoo is what the rules are fitted on.
CUTS = (50, 100, 200)


def _truth(curve: np.ndarray, t: int) -> float:
    """The loss the run actually had around step t: the median of a window of about a twentieth of t around it."""
    half = max(1, t // (2 * BINS))
    return float(np.median(curve[max(0, t - 1 - half) : min(len(curve), t + half)]))


def continuations(records, forms: Sequence[str] = tuple(FORMS), cuts: Sequence[int] = CUTS):
    """One row per record, cut, multiple and form: the forecast at the cut and what the run reached there.

    Columns: dataset, cell, healthy (no fault planted), form, cut, steps (the step forecast), now, first, forecast,
    truth, standard_error.
    Records whose curve does not reach the step forecast, or whose forecast fails, are left out.
    """
    import pandas as pd  # the study needs pandas; a forecast alone does not

    rows = []
    for record in records.to_dict("records"):
        raw = record.get("train_loss_curve")
        curve = np.array([v for v in (raw if raw is not None else []) if v is not None], dtype=float)
        if len(curve) == 0 or not np.all(np.isfinite(curve)):
            continue
        for cut in cuts:
            targets = [m * cut for m in MULTIPLES if m * cut <= len(curve)]
            if not targets:
                continue
            for form in forms:
                made = forecast(curve[:cut], form=form, interval_scale=1.0)
                if made is None:
                    continue
                for t in targets:
                    value, half = made.at[t]
                    rows.append(
                        {
                            "dataset": record.get("dataset"),
                            "cell": record.get("cell_id"),
                            "healthy": record.get("diagnosis", "healthy") == "healthy",
                            "form": form,
                            "cut": cut,
                            "steps": t,
                            "first": made.first,
                            "now": made.now,
                            "forecast": value,
                            "truth": _truth(curve, t),
                            "standard_error": half / Z_90,
                        }
                    )
    return pd.DataFrame(rows)


def interval_scale(table) -> float:
    """The factor on the standard error that makes a 90% interval cover 90% of these forecasts' errors."""
    ratio = (table.forecast - table.truth).abs() / table.standard_error.clip(lower=1e-12)
    return float(np.quantile(ratio, 0.9) / Z_90)


def scores(table) -> "pd.DataFrame":  # noqa: F821 - pandas is imported where the study runs
    """Per form, cut and step forecast: how far off it was (a share of the run's first loss) and coverage.

    `flat` is the forecast that nothing changes (the loss stays where it is): what a forecast must beat.
    Coverage of the 90% interval uses a scale fitted on the other problems (leave-one-problem-out), so that no
    problem's coverage was fitted on itself.
    """
    import pandas as pd

    table = table.assign(fall=table["first"].abs().clip(lower=1e-12))
    table = table.assign(error=(table.forecast - table.truth).abs() / table.fall)
    table = table.assign(flat_error=(table.now - table.truth).abs() / table.fall)
    covered = pd.Series(False, index=table.index)
    for problem in table.dataset.unique():
        mine = table.dataset == problem
        for form in table.form.unique():
            rest = table[~mine & (table.form == form)]
            here = mine & (table.form == form)
            scale = interval_scale(rest) if len(rest) else 1.0
            half = Z_90 * scale * table.standard_error[here]
            covered[here] = (table.forecast[here] - table.truth[here]).abs() <= half
    table = table.assign(covered=covered)
    both = pd.concat([table.assign(runs_of="all"), table[table.healthy].assign(runs_of="healthy")])
    grouped = both.groupby(["runs_of", "form", "cut", "steps"])
    return grouped.agg(
        runs=("error", "size"),
        mean_abs_error=("error", "mean"),
        median_abs_error=("error", "median"),
        flat_mean_abs_error=("flat_error", "mean"),
        coverage_90=("covered", "mean"),
    ).reset_index()


def printout(records) -> list[str]:
    """The study's table and one line per set of runs and form for scripts.

    `forecast <all|healthy> <form> mae <x> median <x> flat <x> coverage <c> scale <s>`: the mean and median
    absolute error (as a share of the first loss) over every cut and multiple, the flat forecast's mean error, the
    90% interval's coverage (its scale fitted leaving the problem out), and the scale fitted on every problem.
    """
    table = continuations(records)
    if table.empty:
        return ["forecast: no record has a finite training-loss curve long enough to score a forecast"]
    result = scores(table)
    lines = [
        "the forecast of the training loss at 2x and 4x the steps, from runs cut at 50, 100 and 200 steps, against"
        " their own continuations; errors as a share of the run's first loss; coverage of the 90% interval with"
        " its scale fitted leaving the problem out",
        result.to_string(index=False, float_format=lambda v: f"{v:.3f}"),
    ]
    for (runs_of, form), mine in result.groupby(["runs_of", "form"]):
        weights = mine.runs / mine.runs.sum()
        lines.append(
            f"forecast {runs_of} {form} mae {float((mine.mean_abs_error * weights).sum()):.3f}"
            f" median {float((mine.median_abs_error * weights).sum()):.3f}"
            f" flat {float((mine.flat_mean_abs_error * weights).sum()):.3f}"
            f" coverage {float((mine.coverage_90 * weights).sum()):.3f}"
            f" scale {interval_scale(table[(table.form == form) & (table.healthy | (runs_of == 'all'))]):.2f}"
        )
    return lines
