"""The report's figures, and the one place that picks matplotlib's backend: files only, no display on these machines.

Every figure of the report is drawn here (the device study's too), and `pyplot()` is how any other module that
draws gets matplotlib (the doctor's plot), so the backend is chosen here and nowhere else. matplotlib is imported
on first use, not when this module is: the doctor and the sweeps import the analysis without ever drawing.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.features import FEATURES, feature_table
from analysis.fit import TUNED_DATASET, is_tuned
from analysis.rules import HEALTHY, RULES


def pyplot():
    """matplotlib.pyplot with the Agg backend (imported on first use: the doctor and the sweeps never need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _role(dataset: str) -> str:
    from analysis.score import role  # scikit-learn comes with analysis.score: only when a figure is drawn

    return role(dataset)


def plot_loss_curves(records: pd.DataFrame, dataset: str, path: Path) -> None:
    """One small panel per fault: every seed's training loss, the healthy runs in grey behind."""
    plt = pyplot()
    rows = records[records.dataset == dataset]
    faults = sorted(rows.fault.unique(), key=lambda f: (f != HEALTHY, f))
    columns = 5
    figure, axes = plt.subplots(
        -(-len(faults) // columns),
        columns,
        figsize=(3.2 * columns, 2.6 * -(-len(faults) // columns)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    healthy = rows[rows.fault == HEALTHY]
    for axis, fault in zip(axes.flat, faults, strict=False):
        for curve in healthy.train_loss_curve:
            axis.plot(curve, color="0.75", linewidth=0.8)
        for curve in rows[rows.fault == fault].train_loss_curve:
            axis.plot(curve, linewidth=0.8)
        axis.axhline(rows.ln_classes.iloc[0], color="black", linestyle=":", linewidth=0.8)
        axis.set_title(fault, fontsize=10)
        axis.set_yscale("log")
    for axis in axes.flat[len(faults) :]:
        axis.set_visible(False)
    for axis in axes[-1]:
        axis.set_xlabel("step")
    for axis in axes[:, 0]:
        axis.set_ylabel("training loss (log)")
    figure.suptitle(f"Training loss of every seed, {dataset} (grey: healthy runs; dotted: ln C)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_confusion(table: pd.DataFrame, title: str, path: Path) -> None:
    """A confusion table (planted fault x verdict) as a heat map with its counts written in."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.5, 5.5))
    axis.imshow(table.to_numpy(), cmap="Blues")
    axis.set_xticks(range(len(table.columns)), table.columns, rotation=45, ha="right")
    axis.set_yticks(range(len(table.index)), table.index)
    for (i, j), count in np.ndenumerate(table.to_numpy()):
        if count:
            axis.text(
                j,
                i,
                str(count),
                ha="center",
                va="center",
                color="white" if count > table.to_numpy().max() / 2 else "black",
            )
    axis.set_xlabel("verdict")
    axis.set_ylabel("planted fault")
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_measurements(records: pd.DataFrame, thresholds: dict[str, float], path: Path) -> None:
    """Each rule's measurement against the planted fault, both datasets, with the fitted threshold drawn."""
    plt = pyplot()
    table = feature_table(records)
    faults = sorted(records.diagnosis.unique(), key=lambda f: (f != HEALTHY, f))
    columns = 4
    figure, axes = plt.subplots(-(-len(RULES) // columns), columns, figsize=(20, 4.2 * -(-len(RULES) // columns)))
    for axis, rule in zip(axes.flat, RULES, strict=False):
        tuned = records.dataset.map(is_tuned)
        for offset, (dataset, marker) in zip((-0.15, 0.15), ((TUNED_DATASET, "o"), ("other", "x")), strict=True):
            mask = tuned if dataset == TUNED_DATASET else ~tuned
            xs = [faults.index(f) + offset for f in records.diagnosis[mask]]
            axis.scatter(
                xs,
                table.loc[mask, rule.feature],
                marker=marker,
                s=14,
                label=f"{dataset} ({_role(dataset)})" if dataset == TUNED_DATASET else "held-out datasets",
            )
        axis.axhline(thresholds[rule.verdict], color="red", linewidth=1, label="fitted threshold")
        if FEATURES[rule.feature].log:
            axis.set_yscale("log")
        axis.set_xticks(range(len(faults)), faults, rotation=60, ha="right", fontsize=8)
        axis.set_title(f"{rule.verdict}: {rule.feature}", fontsize=10)
        axis.set_ylabel(FEATURES[rule.feature].sentence, fontsize=7)
    for axis in axes.flat[len(RULES) :]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("Each rule's feature by planted fault (red: the threshold fitted on digits and the zoo, 600 steps)")
    figure.tight_layout(rect=(0, 0, 1, 0.98))  # leave the top strip to the title
    figure.savefig(path, dpi=80)
    plt.close(figure)


def plot_early(summary: pd.DataFrame, path: Path) -> None:
    """Share of cells diagnosed correctly per step budget, one line per dataset (analysis/early.py's summary)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    for dataset, group in summary.groupby("dataset"):
        axis.plot(group.steps, group.correct / group.total, marker="o", label=f"{dataset} ({_role(dataset)})")
    axis.set_xscale("log")
    axis.set_xticks(sorted(summary.steps.unique()), [str(s) for s in sorted(summary.steps.unique())])
    axis.minorticks_off()
    axis.set_ylim(0, 1.02)
    axis.set_xlabel("training steps the verdict rests on (log)")
    axis.set_ylabel("share of cells diagnosed correctly")
    axis.set_title("Rules with each budget's own thresholds, on the same runs cut short")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_devices(table: pd.DataFrame, path: Path) -> None:
    """The device study: time per step against width, one line per device and batch size (log-log).

    `table` is analysis/devices.py's study_table.
    """
    plt = pyplot()
    ok = table[table.status == "ok"]
    figure, axis = plt.subplots(figsize=(7, 5))
    for (device, batch), group in ok.groupby(["device", "batch_size"]):
        axis.plot(
            group.width,
            group.step_ms,
            marker="o",
            linestyle="-" if device == "cuda" else "--",
            label=f"{device}, batch {batch}",
        )
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("hidden width")
    axis.set_ylabel("time per training step (ms, log)")
    axis.set_title("Time per step by width, device and batch size (digits MLP)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
