"""A picture of the run: one figure of what the doctor's verdict rests on.

`plot_report(report, "run.png")` (or `report.plot("run.png")`, or `python -m doctor RECIPE --plot run.png`)
writes one PNG; `figure_of(report)` builds the same matplotlib Figure without saving it. Its panels, top to bottom:

1. one panel per failing finding, titled with its verdict and the feature its rule read (analysis/features.py),
   against the threshold it was judged with: over the run where the instruments recorded that feature's
   ingredients step by step or census by census (`SERIES`), else the value as a marker at the step it was read
   (the first step for what is read at initialization or on the first batch, the last for what is read over the
   run or at its end). unexplained_failure, which no one feature decides, gets none;
2. the total gradient norm at each census, and the update-to-weight ratio at each census against the thresholds
   of the rules that read it;
3. each parameter's gradient norm (median over the gradient censuses), log scale, and which parameters never
   got a gradient; the share of the loop spent waiting for batches against the starved_loader threshold;
4. last, the training loss per step, with the loss spikes the instruments found marked at their steps.

Everything drawn is measured (`report.measurements`, and each finding's value as its rule judged it) or a
threshold: a finding's own, and for the panels of 2 and 3 the fitted thresholds of the budget nearest to the
run's steps (`analysis/thresholds.json`). A panel whose series is missing or all NaN says "not measured" instead.
A threshold is drawn on the scale of the series in its panel; where the rule reads a feature derived from it
(analysis/features.py), the conversion is exact for this run and the line's label says so. Every legend says
what it shows in words.
"""

import itertools
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from analysis.checks.base import Finding
from analysis.features import FEATURES
from analysis.plots import pyplot
from analysis.rules import RULES, load_thresholds
from harness.columns import DECLARED

NOT_MEASURED = "not measured"


def plot_report(report, path: str | Path, thresholds: Mapping[str, float] | None = None) -> Path:
    """Write the figure of `report` to `path` (a PNG) and return the path.

    `thresholds` (rule verdict -> threshold) defaults to the fitted ones of the budget nearest to the run's steps,
    the same the doctor judged the run with unless it was given others.
    """
    path = Path(path)
    figure = figure_of(report, thresholds)
    try:
        figure.savefig(path, format="png", dpi=100)
    finally:
        pyplot().close(figure)  # pyplot keeps every figure it made until closed
    return path


def figure_of(report, thresholds: Mapping[str, float] | None = None):
    """The matplotlib Figure of `report`, unsaved (close it with pyplot's close when done).

    Each panel's Axes carries a label ("finding:VERDICT" for each failing finding's, then "grad_norm_curve",
    "update_ratio", "grad_norm", "data_wait" and "loss") and each drawn threshold a gid ("threshold:VERDICT", or
    "finding_threshold:VERDICT" in a finding's panel), so that the figure can be read back.
    """
    thresholds = load_thresholds(report.steps) if thresholds is None else dict(thresholds)
    m = report.measurements
    names = _list(m.get("param_names"))
    judged = [f for f in report.failing if f.feature is not None]
    plt = pyplot()
    # The per-parameter bars need room for one name per row: a deep model gets a taller figure.
    height = 10 + 2.6 * len(judged) + max(0, len(names) - 16) * 0.16
    figure = plt.figure(figsize=(14, height), layout="constrained")
    n = len(judged)
    grid = figure.add_gridspec(n + 3, 2, height_ratios=[1.1] * n + [1, 1, 1.2])
    for row, finding in enumerate(judged):
        _finding_panel(figure.add_subplot(grid[row, :], label=f"finding:{finding.verdict}"), finding, m, report.steps)
    _grad_norm_panel(figure.add_subplot(grid[n, 0], label="grad_norm_curve"), m)
    _update_ratio_panel(figure.add_subplot(grid[n + 1, 0], label="update_ratio"), m, thresholds)
    right = grid[n : n + 2, 1].subgridspec(2, 1, height_ratios=[6, 1])
    _param_panel(figure.add_subplot(right[0], label="grad_norm"), m)
    _data_wait_panel(figure.add_subplot(right[1], label="data_wait"), m, thresholds)
    _loss_panel(figure.add_subplot(grid[n + 2, :], label="loss"), m)
    figure.suptitle(_title(report), fontsize=13)
    return figure


def _title(report) -> str:
    title = f"verdict: {report.verdict}  (from {report.steps} training steps)"
    failing = [f.verdict for f in report.failing[1:]]
    warned = [f.verdict for f in report.warnings]
    more = ([f"also failing: {', '.join(failing)}"] if failing else []) + (
        [f"warnings: {', '.join(warned)}"] if warned else []
    )
    return title + (f"\n{'; '.join(more)}" if more else "")


# ----- helpers ---------------------------------------------------------------------------------------------------
def _list(values) -> list:
    """A series as a list, empty where it is missing (a list, a tuple or a numpy array in a record)."""
    return [] if values is None else list(values)


def _floats(values) -> list[float]:
    """The series as floats, NaN for a missing or non-numeric entry (None in a record read back from JSON)."""
    out = []
    for value in _list(values):
        try:
            out.append(math.nan if value is None else float(value))
        except (TypeError, ValueError):
            out.append(math.nan)
    return out


def _finite(values: Sequence[float]) -> bool:
    return any(math.isfinite(v) for v in values)


def _not_measured(ax, title: str, why: str = "") -> None:
    """An empty panel that says so: nothing is drawn where nothing was measured."""
    ax.set_title(title)
    ax.text(0.5, 0.5, NOT_MEASURED + (f"\n({why})" if why else ""), ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _log_if_positive(ax, values: Sequence[float], axis: str = "y") -> None:
    """A log axis for a series that spans orders of magnitude, when every finite value can be put on one."""
    finite = [v for v in values if math.isfinite(v)]
    if finite and min(finite) > 0:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


# ----- each failing finding: its own feature against its threshold -------------------------------------------------
# The record columns read at the start of the run, on its first batch or on the weights before any update: a
# feature computed from these alone is drawn at the first step, any other at the last (read over the run, or at
# its end: the trained model's scores, the quick references, the totals of the loop).
READ_AT_START = frozenset(
    {
        "first_loss",
        "ln_classes",
        "input_rms",
        "loss_kind",
        "task",
        "dead_unit_share_init",
        "activation_growth_init",
        "grad_depth_ratio_init",
        "saturated_share_init",
    }
)
MEANINGS = {column.name: column.meaning for column in DECLARED}  # the record columns the unfitted facts read


class Series(NamedTuple):
    """A feature over the run: at each of `steps` the value it would have had then, and how the rule reads it."""

    steps: list[float]
    values: list[float]
    words: str  # what the curve is, for its legend
    reading: str  # "peak" (the largest value) or "last": the value the rule judged


def _update_ratios(m: Mapping) -> tuple[list[float], list[float]] | None:
    """The update ratio at each census step; None where the ratios cannot be placed at their census steps."""
    curve, steps = _floats(m.get("update_ratio_curve")), _floats(m.get("census_steps"))
    return (steps, curve) if _finite(curve) and len(curve) == len(steps) else None


def _peak_series(m: Mapping) -> Series | None:
    ratios = _update_ratios(m)
    words = "median update ratio of the weight matrices at each census step"
    return None if ratios is None else Series(*ratios, words, "peak")


def _progress_series(m: Mapping) -> Series | None:
    ratios = _update_ratios(m)
    if ratios is None:
        return None
    left = _loss_left(m)
    words = f"update ratio at each census step x share of the first loss left at the end ({left:.2f})"
    return Series(ratios[0], [r * left for r in ratios[1]], words, "peak")


def _nonfinite_series(m: Mapping) -> Series | None:
    losses = _floats(m.get("train_loss_curve"))
    counted = list(itertools.accumulate(int(not math.isfinite(v)) for v in losses))
    return Series(list(range(len(losses))), counted, "non-finite training losses so far", "last") if losses else None


# The features whose ingredients the instruments record over the run, each as the curve the rule reads.
SERIES: dict[str, Callable[[Mapping], Series | None]] = {
    "update_ratio_peak": _peak_series,
    "steps_without_progress": _progress_series,
    "nonfinite_losses": _nonfinite_series,
}


def read_at_start(feature: str) -> bool:
    """Whether a feature (or an unfitted fact's record column) is read at the start of the run."""
    columns = FEATURES[feature].reads if feature in FEATURES else (feature,)
    return bool(columns) and all(column in READ_AT_START for column in columns)


def series_of(finding: Finding, m: Mapping) -> Series | None:
    """The finding's feature over the run, where it was recorded and its reading is the value the rule judged."""
    made = SERIES[finding.feature](m) if finding.feature in SERIES else None
    if made is None:
        return None
    finite = [v for v in made.values if math.isfinite(v)]
    read = (max(finite) if made.reading == "peak" else made.values[-1]) if finite else math.nan
    return made if math.isclose(read, finding.value, rel_tol=1e-9, abs_tol=1e-12) else None


def _reading_index(series: Series) -> int:
    """Where on the curve the rule's value lies: its largest finite value, or its last."""
    if series.reading == "last":
        return len(series.values) - 1
    finite = [i for i, v in enumerate(series.values) if math.isfinite(v)]
    return max(finite, key=lambda i: series.values[i])


def _finding_panel(ax, finding: Finding, m: Mapping, steps: int) -> None:
    """The feature a failing finding rests on, over the run or at the step it was read, against its threshold."""
    feature, value, threshold = finding.feature, finding.value, finding.threshold
    sentence = FEATURES[feature].sentence if feature in FEATURES else MEANINGS.get(feature, "")
    ax.set_title(f"{finding.verdict}: {feature}\n{textwrap.shorten(sentence, 150)}", fontsize=9)
    series = series_of(finding, m)
    if series is not None:
        ax.plot(series.steps, series.values, marker="o", ms=3, lw=1, color="tab:blue", label=series.words)
        at = series.steps[_reading_index(series)]
        label = f"the value judged, {value:.3g} (the {series.reading} of the curve)"
    else:
        at = 0 if read_at_start(feature) else max(steps - 1, 0)
        when = "read at initialization, on the first batch" if at == 0 else "read over the run, at its end"
        label = f"{feature} = {value:.3g}, {when}"
    if math.isfinite(value):
        ax.scatter([at], [value], color="tab:red", zorder=3, s=40, label=label).set_gid(f"judged:{finding.verdict}")
    else:
        ax.plot([], [], " ", label=f"{feature} = {value}, {'' if series else 'at its step, '}not drawn")
    words = f"threshold {threshold:.3g}, the one judged with: {finding.verdict} fires {finding.direction} it"
    line = ax.axhline(threshold, ls="--", lw=1, color="tab:red", label=words)
    line.set_gid(f"finding_threshold:{finding.verdict}")
    drawn = [v for v in [value, threshold, *(series.values if series else [])] if math.isfinite(v)]
    if feature in FEATURES and FEATURES[feature].log and drawn and min(drawn) > 0:
        ax.set_yscale("log")
    ax.set_xlim(-0.5, max(steps, 1) - 0.5)  # the run's steps, as in the loss panel
    ax.set_xlabel("training step")
    ax.set_ylabel(feature + (" (log scale)" if ax.get_yscale() == "log" else ""), fontsize=8)
    ax.legend(loc="best", fontsize=7)


# ----- 1. the loss curve and its spikes -------------------------------------------------------------------------
def _loss_panel(ax, m: Mapping) -> None:
    losses = _floats(m.get("train_loss_curve"))
    title = "training loss per step"
    if not _finite(losses):
        _not_measured(ax, title, "no finite training loss" if losses else "")
        return
    # A NaN or inf loss cannot be drawn: leave a gap there and say how many, rather than clip it to something.
    shown = [v if math.isfinite(v) else math.nan for v in losses]
    ax.plot(range(len(shown)), shown, lw=1, color="tab:blue", label="training loss (one batch per step)")
    spikes = [int(s) for s in _list(m.get("loss_spike_steps")) if 0 <= int(s) < len(losses)]
    finite_spikes = [s for s in spikes if math.isfinite(losses[s])]
    spike_points = ax.scatter(
        finite_spikes,
        [losses[s] for s in finite_spikes],
        color="tab:red",
        zorder=3,
        label=f"loss spikes, steps whose loss jumped far out of its recent range ({len(spikes)} found)",
    )
    spike_points.set_gid("loss_spikes")
    for s in sorted(set(spikes) - set(finite_spikes)):  # a spike to NaN or inf: its step, not a made-up height
        ax.axvline(s, color="tab:red", ls=":", lw=1)
    nonfinite = sum(not math.isfinite(v) for v in losses)
    if nonfinite:
        ax.plot([], [], " ", label=f"{nonfinite} non-finite losses not drawn (gaps)")
    _log_if_positive(ax, shown)
    ax.set_xlim(-0.5, len(losses) - 0.5)  # the whole run, where the loss went non-finite too
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel("loss" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.legend(loc="upper right", fontsize=8)


# ----- 2. gradient norms per parameter, and in total per census ----------------------------------------------------
def _param_panel(ax, m: Mapping) -> None:
    names = _list(m.get("param_names"))
    norms = _floats(m.get("grad_norm"))
    missing = [bool(v) for v in _list(m.get("grad_missing"))]
    title = "gradient norm per parameter (median over the censuses)"
    if not names or len(norms) != len(names) or not (_finite(norms) or any(missing)):
        _not_measured(ax, title, "no gradient census" if names else "")
        return
    missing += [False] * (len(names) - len(missing))
    rows = range(len(names))
    # Only what was measured gets a bar; a parameter without a gradient (or a zero one) gets words, not a bar,
    # since no bar length on a log axis would be true.
    measured = [i for i in rows if math.isfinite(norms[i]) and norms[i] > 0]
    bars = ax.barh(measured, [norms[i] for i in measured], color="tab:blue", label="median gradient norm")
    for bar in bars:
        bar.set_gid("grad_norm_bar")
    if measured:
        # A bar on a log axis starts at the axis's left edge: put that a decade boundary below the smallest norm,
        # so the smallest bar shows and lengths read in decades.
        ax.set_xscale("log")
        ax.set_xlim(left=10 ** math.floor(math.log10(min(norms[i] for i in measured))))
        ax.xaxis.set_minor_formatter("")  # the decades alone: minor labels would overlap across several
    for i in rows:
        if i in measured:
            continue
        words = "never got a gradient" if missing[i] else ("gradient all zero" if norms[i] == 0 else NOT_MEASURED)
        ax.text(0.01, i, words, transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="tab:red")
    ax.set_yticks(list(rows), names, fontsize=max(4, min(8, 400 / len(names))))
    for i, label in zip(rows, ax.get_yticklabels(), strict=True):
        if missing[i]:
            label.set_color("tab:red")
    ax.set_ylim(len(names) - 0.5, -0.5)  # every row, bar or not; the first parameter at the top, as listed
    ax.set_title(title)
    ax.set_xlabel("gradient norm (log scale)" if measured else "")


def _grad_norm_panel(ax, m: Mapping) -> None:
    steps = _floats(m.get("census_steps"))
    total = _floats(m.get("grad_norm_curve"))
    title = "total gradient norm at each census"
    if not steps or len(steps) != len(total) or not _finite(total):
        why = "no gradient census" if not steps else "NaN or inf gradients at every census" if total else ""
        _not_measured(ax, title, why)
        return
    ax.plot(steps, total, marker="o", color="tab:green", label="norm of all gradients together")
    unread = [step for step, norm in zip(steps, total, strict=True) if not math.isfinite(norm)]
    if unread:  # a gap in the line, and a mark on the axis where it is
        ax.plot(unread, [0] * len(unread), "x", color="tab:red", transform=ax.get_xaxis_transform(), clip_on=False)
        ax.plot([], [], "x", color="tab:red", label=f"NaN or inf gradients ({len(unread)} censuses)")
        ax.legend(fontsize=7)
    _log_if_positive(ax, total)
    ax.set_title(title)
    ax.set_xlabel("census step")
    ax.set_ylabel("gradient norm" + (" (log scale)" if ax.get_yscale() == "log" else ""))


# ----- 3. the update-to-weight ratio against the rules that read it -----------------------------------------------
def _loss_left(m: Mapping) -> float:
    """The share of the first loss left at the end, in [0, 1], as analysis.loss_curves.steps_without_progress has it."""
    first, final = _floats([m.get("first_loss"), m.get("final_train_loss")])
    left = final / first if math.isfinite(final) and math.isfinite(first) and first > 0 else 1.0
    return min(max(left, 0.0), 1.0)


def _on_ratio_scale(m: Mapping) -> dict[str, tuple[Callable[[float], float], str]]:
    """Features read from the update ratio's peak, each with its threshold's conversion to the ratio's own scale.

    update_ratio_peak is the curve's highest value itself. steps_without_progress is that peak times the share of
    the first loss left at the end (analysis/features.py), so for this run it crosses its threshold t exactly when
    the peak crosses t / (loss left).
    """
    left = _loss_left(m)
    return {
        "update_ratio_peak": (lambda t: t, "peak {op} {t:.2g}"),
        "steps_without_progress": (
            lambda t: t / left if left > 0 else math.inf,
            "peak x loss left {op} {t:.2g}, so with loss left " + f"{left:.2f}" + " peak {op} {line:.2g}",
        ),
    }


def _update_ratio_panel(ax, m: Mapping, thresholds: Mapping[str, float]) -> None:
    curve = _floats(m.get("update_ratio_curve"))
    steps = _floats(m.get("census_steps"))
    title = "update-to-weight ratio (median over the weight matrices)"
    if not _finite(curve):
        _not_measured(ax, title, "no optimizer step after a census" if steps else "")
        return
    # Each ratio is read on the first optimizer step at or after a census: one per census, unless several censuses
    # came before one step (gradient accumulation) or the loop ended first. Only when there is one ratio per census
    # is it known which census each belongs to; otherwise they are drawn in order, one per measured step.
    if len(curve) == len(steps):
        x, xlabel = steps, "census step (the ratio is read at the optimizer step that follows it)"
    else:
        x = list(range(len(curve)))
        xlabel = f"measured optimizer step, in order ({len(curve)} for {len(steps)} censuses)"
    ax.plot(x, curve, marker="o", color="tab:purple", label="update norm / weight norm")
    _log_if_positive(ax, curve)
    converters = _on_ratio_scale(m)
    for rule in RULES:
        if rule.feature not in converters or rule.verdict not in thresholds:
            continue
        convert, words = converters[rule.feature]
        threshold = thresholds[rule.verdict]
        line = convert(threshold)
        op = ">" if rule.above else "<"
        label = f"{rule.verdict} fires if " + words.format(op=op, t=threshold, line=line)
        if not math.isfinite(line):
            ax.plot([], [], " ", label=f"{rule.verdict} cannot fire (no loss left), so no line")
            continue
        color = "tab:red" if rule.above else "tab:orange"
        ax.axhline(line, ls="--", lw=1, color=color, label=label).set_gid(f"threshold:{rule.verdict}")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("update ratio" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.legend(loc="best", fontsize=7)


# ----- 4. the time spent waiting for data -------------------------------------------------------------------------
def _data_wait_panel(ax, m: Mapping, thresholds: Mapping[str, float]) -> None:
    (share,) = _floats([m.get("data_wait_share")])
    title = "share of the loop spent waiting for batches"
    if not math.isfinite(share):
        _not_measured(ax, title)
        return
    ax.barh([0], [share], color="tab:cyan", label=f"waited {share:.1%} of the loop")
    ax.set_xlim(0, 1)
    ax.set_yticks([])
    # starved_loader reads wait / (loop - wait) (analysis/features.py: data_wait_ratio); the share is wait / loop,
    # so a ratio threshold t is the share t / (1 + t), exactly.
    t = thresholds.get("starved_loader")
    if t is not None and math.isfinite(t) and t >= 0:
        line = t / (1 + t)
        label = f"starved_loader fires above {t:.2g} s waiting per s of compute, a share above {line:.0%}"
        ax.axvline(line, ls="--", color="tab:red", label=label).set_gid("threshold:starved_loader")
    ax.set_title(title)
    ax.set_xlabel("time waiting for batches / loop time")
    ax.legend(loc="upper right", fontsize=7)
