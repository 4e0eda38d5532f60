"""Benchmark of the fault grid: three ratios, each measured side by side in this one run.

1. The grid of the first ten conditions (100 CPU cells: the default grid's sweep with its fault axis cut to the
   first ten conditions; the entry point is the real one) against its floor: floor = 5 seeds x the sum of the
   20 bare cells (each condition on each dataset) / cores, where a bare cell is that condition's 600-step loop
   plus the three 300-step memorization runs with no instruments and no harness (no Hydra, no records, no
   workers). Each condition has its own bare cell because they do not all cost the same: the starved loader
   stalls three times its step's compute before every batch, by design, and a frozen or smaller model steps
   faster. Beside it, the floor as it was first defined (every cell costed as the healthy bare cell; it ignores
   those differences), and, from the records, the cells' own wall time and the sweep's fixed costs: from launch
   to the first cell's start (the workers' imports) and from the last cell's end to exit, with the floor of the
   first: a fresh Python importing what every cell needs (torch, torch._dynamo, scikit-learn).
2. Instrument overhead: the 600-step loop with the instruments against the same loop without them.
3. The same grid on 2 workers against 1 worker.

Run it with `make bench` (about 5 minutes on 2 cores). The machines are shared and noisy: timings are medians
of repeated, interleaved runs, and only ratios taken within this run are worth quoting.
"""

import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parent.parent
CORES = len(os.sched_getaffinity(0))
# The first ten conditions, each on both datasets and 5 seeds: 100 cells.
FAULTS = "healthy,lr_too_high,lr_too_low,no_zero_grad,unscaled_inputs,dead_relu,model_too_small,shuffled_labels,"
FAULTS += "frozen_params,starved_loader"
DATASETS = ("digits", "synthetic")
SEEDS = 5
GRID_CELLS = len(FAULTS.split(",")) * len(DATASETS) * SEEDS


def config(*overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def bare_cells_seconds(measure, repeats=3) -> dict[tuple[str, str], float]:
    """The median bare cell of each condition on each dataset, the recipes taken in turn in each round.

    Round by round rather than one recipe's repeats in a row, so that a slow spell of the machine falls on all.
    """
    configs = {(f, d): config(f"fault={f}", f"dataset={d}") for f in FAULTS.split(",") for d in DATASETS}
    seconds = {recipe: [] for recipe in configs}
    for _ in range(repeats):
        for recipe, cfg in configs.items():
            seconds[recipe].append(timed(measure, cfg, torch.device("cpu"), False))
    return {recipe: statistics.median(values) for recipe, values in seconds.items()}


def loop_overhead(measure, repeats=7) -> tuple[float, float]:
    """Median seconds of the 600-step loop without and with the instruments, interleaved run by run."""
    cfg = config("memorize.steps=0")  # the loop alone: memorization is the same with or without instruments
    bare, observed = [], []
    for _ in range(repeats):
        bare.append(timed(measure, cfg, torch.device("cpu"), False))
        observed.append(timed(measure, cfg, torch.device("cpu"), True))
    return statistics.median(bare), statistics.median(observed)


def grid_seconds(records: Path, jobs: int) -> tuple[float, float, float, float]:
    """Wall time of the default grid through the real entry point, from launch to exit.

    Also returns the summed wall time of its cells, as their records give it, and from their start times the
    sweep's two fixed costs: from launch to the first cell's start, and from the last cell's end to exit.
    """
    command = [sys.executable, "-m", "harness", "+sweep=default", f"fault={FAULTS}", f"run.records={records}"]
    launched, start = time.time(), time.perf_counter()
    subprocess.run([*command, f"hydra.sweeper.n_jobs={jobs}"], cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    frame = pd.read_parquet(records)
    assert len(frame) == GRID_CELLS and (frame.status == "ok").all(), "the grid must produce 100 ok records"
    started = frame.started_at.map(lambda t: t.timestamp())  # the records' clock is the wall clock (UTC)
    first_start = started.min() - launched
    after_last = launched + wall - (started + frame.wall_s).max()
    return wall, frame.wall_s.sum(), first_start, after_last


def import_floor_seconds(repeats=3) -> float:
    """Median seconds for a fresh Python to import what every cell needs, as a warm worker does (collector off).

    No sweep can start its first cell sooner after launch than this: it is the start-up's floor.
    """
    code = "import gc; gc.disable(); import torch._dynamo, harness.cell"
    return statistics.median(
        timed(subprocess.run, [sys.executable, "-c", code], cwd=ROOT, check=True) for _ in range(repeats)
    )


def verdict(ratio: float, goal: float, at_most: bool) -> str:
    met = ratio <= goal if at_most else ratio >= goal
    return f"(goal {'<=' if at_most else '>='} {goal}: {'met' if met else 'MISSED'})"


def main() -> None:
    torch.set_num_threads(1)  # as every cell does
    torch.set_flush_denormal(True)
    from harness.cell import measure

    measure(config("loop.steps=5", "memorize.steps=5"), torch.device("cpu"), True)  # first-use imports, not timed
    gc.freeze()  # as the sweep's workers do after their imports (harness.sweep): the floor pays no more GC than they
    print(f"machine: {CORES} cores, torch {torch.__version__}, python {sys.version.split()[0]}")

    bare = bare_cells_seconds(measure)
    floor = SEEDS * sum(bare.values()) / CORES
    healthy = statistics.mean(bare["healthy", d] for d in DATASETS)
    healthy_floor = GRID_CELLS * healthy / CORES  # the first definition: every cell costed as a healthy one
    with tempfile.TemporaryDirectory() as scratch:
        two, cells_two, first_start, after_last = grid_seconds(Path(scratch) / "two", jobs=CORES)
        one, *_ = grid_seconds(Path(scratch) / "one", jobs=1)
    loop_bare, loop_observed = loop_overhead(measure)
    imports = import_floor_seconds()
    loop_ratio = loop_observed / loop_bare

    grid_ratio, cells_ratio, workers_ratio = two / floor, cells_two / CORES / floor, one / two
    slowest = max(bare, key=bare.get)
    print(
        f"bare cells (medians of 3, 20 recipes): healthy {healthy:.3f} s (mean of {', '.join(DATASETS)}), "
        f"from {min(bare.values()):.3f} s to {bare[slowest]:.3f} s ({' on '.join(slowest)}); "
        f"floor = {SEEDS} x their sum / {CORES}"
    )
    print(
        f"1. grid wall / floor:        {two:.1f} s / {floor:.1f} s = {grid_ratio:.2f}x", verdict(grid_ratio, 1.3, True)
    )
    print(
        f"   against the healthy floor: {two:.1f} s / {healthy_floor:.1f} s = {two / healthy_floor:.2f}x "
        f"(every cell costed as a healthy bare cell, {GRID_CELLS} x {healthy:.3f} / {CORES})"
    )
    print(f"   the cells' own wall / {CORES}:  {cells_two / CORES:.1f} s = {cells_ratio:.2f}x the floor")
    print(f"   launch to the first cell:  {first_start:.1f} s; last cell's end to exit: {after_last:.1f} s")
    print(f"   one process importing what a cell needs (the start's floor): {imports:.1f} s")
    print(
        f"2. instrumented / bare loop: {loop_observed:.3f} s / {loop_bare:.3f} s = {loop_ratio:.3f}x",
        verdict(loop_ratio, 1.15, True),
    )
    print(
        f"3. 1 worker / {CORES} workers:     {one:.1f} s / {two:.1f} s = {workers_ratio:.2f}x",
        verdict(workers_ratio, 1.8, False),
    )


if __name__ == "__main__":
    main()
