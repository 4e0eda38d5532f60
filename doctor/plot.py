"""A picture of the run: one figure of what the doctor's verdict rests on.

`plot_report(report, "run.png")` (or `report.plot("run.png")`, or `python -m doctor RECIPE --plot run.png`)
writes one PNG; `figure_of(report)` builds the same matplotlib Figure without saving it. Its panels:

1. the training loss per step, with the loss spikes the instruments found marked at their steps;
2. each parameter's gradient norm (median over the gradient censuses), log scale, and which parameters never
   got a gradient;
3. the total gradient norm at each census;
4. the update-to-weight ratio at each census against the thresholds of the rules that read it;
5. the share of the loop spent waiting for batches against the starved_loader threshold.

Everything drawn is measured (`report.measurements`) or a fitted threshold (`analysis/thresholds.json`, the
budget nearest to the run's steps): a panel whose series is missing or all NaN says "not measured" instead.
A threshold is drawn on the scale of the series in its panel; where the rule reads a feature derived from it
(analysis/features.py), the conversion is exact for this run and the line's label says so.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from analysis.plots import pyplot
from analysis.rules import RULES, load_thresholds

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

    Each panel's Axes carries a label ("loss", "grad_norm", "grad_norm_curve", "update_ratio", "data_wait") and
    each drawn threshold a gid "threshold:VERDICT", so that the figure can be read back.
    """
    thresholds = load_thresholds(report.steps) if thresholds is None else dict(thresholds)
    m = report.measurements
    names = _list(m.get("param_names"))
    plt = pyplot()
    # The per-parameter bars need room for one name per row: a deep model gets a taller figure.
    height = 10 + max(0, len(names) - 16) * 0.16
    figure = plt.figure(figsize=(14, height), layout="constrained")
    grid = figure.add_gridspec(3, 2, height_ratios=[1.2, 1, 1])
    _loss_panel(figure.add_subplot(grid[0, :], label="loss"), m)
    _grad_norm_panel(figure.add_subplot(grid[1, 0], label="grad_norm_curve"), m)
    _update_ratio_panel(figure.add_subplot(grid[2, 0], label="update_ratio"), m, thresholds)
    right = grid[1:, 1].subgridspec(2, 1, height_ratios=[6, 1])
    _param_panel(figure.add_subplot(right[0], label="grad_norm"), m)
    _data_wait_panel(figure.add_subplot(right[1], label="data_wait"), m, thresholds)
    figure.suptitle(_title(report), fontsize=13)
    return figure


def _title(report) -> str:
    title = f"verdict: {report.verdict}  (from {report.steps} training steps)"
    later = [f.verdict for f in report.findings[1:]]
    return title + (f"\nalso fired: {', '.join(later)}" if later else "")


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
        label=f"loss spikes ({len(spikes)}: the instruments' steps)",
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
        _not_measured(ax, title, "no gradient census" if not steps else "")
        return
    ax.plot(steps, total, marker="o", color="tab:green", label="norm of all gradients together")
    _log_if_positive(ax, total)
    ax.set_title(title)
    ax.set_xlabel("census step")
    ax.set_ylabel("gradient norm" + (" (log scale)" if ax.get_yscale() == "log" else ""))


# ----- 3. the update-to-weight ratio against the rules that read it -----------------------------------------------
def _loss_left(m: Mapping) -> float:
    """The share of the first loss left at the end, in [0, 1], as analysis.features._steps_without_progress has it."""
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
            "peak x loss left {op} {t:.2g}; loss left " + f"{left:.2f}" + ": peak {op} {line:.2g}",
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
            ax.plot([], [], " ", label=f"{rule.verdict}: cannot fire (no loss left), no line")
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
        label = f"starved_loader fires if wait/compute > {t:.2g}: share > {line:.0%}"
        ax.axvline(line, ls="--", color="tab:red", label=label).set_gid("threshold:starved_loader")
    ax.set_title(title)
    ax.set_xlabel("time waiting for batches / loop time")
    ax.legend(loc="upper right", fontsize=7)
