"""Benchmark of the doctor, measured side by side in one run.

1. Its cost on a user's loop, under its cost budget (default 3% of the loop's own time: harness/instruments/
   budget.py) and watching every step (budget=None), against the bare loop: the grid's digits MLP (about a
   millisecond a step), 600 steps and 3000; and a wider MLP on bigger batches (about 10 ms a step). Whole runs in
   turn (bare, budget, every step; which goes first rotates), the ratio of each to the bare run of its round, the
   median over rounds. The report after the loop is timed apart (it adds the evaluations and the fits). Beside
   each: the doctor's own measure of its cost and the steps it chose to watch in full (the budget's sampling).
   Whole runs, not steps interleaved: the budget reads the loop's time off the clock, and a loop interleaved with
   another would look twice as long to it.
2. Time to a verdict in probe mode on the CPU, for the example recipes.

Run it with `make bench-doctor` (bench/integrations_overhead.py then measures the Lightning and Hugging Face
callbacks the same way). Only ratios within one run are worth quoting.
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from torch import nn

from doctor import Doctor
from doctor.recipe import load, run
from harness.data import load_splits, training_batches
from harness.model import MLP

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 9
GOAL = 1.03  # the doctor's cost on the loop of one-millisecond steps, at most (issue 34)
MODES = {"bare": None, "budget": 0.03, "every step": None}  # the Doctor's budget= in each mode


def user_loop(data, mode: str, steps: int, width: int, batch: int) -> tuple[float, float, object]:
    """Seconds of the loop, of the report after it (0 without the doctor), and the doctor's cost (None: none)."""
    torch.manual_seed(0)
    model = MLP(data.x_train.shape[1], data.n_classes, hidden=[width, width])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    batches = training_batches(data.x_train, data.y_train, batch, seed=0)
    start = time.perf_counter()
    if mode != "bare":
        doctor = Doctor(model, optimizer, loss_fn, validation=[(data.x_val, data.y_val)], budget=MODES[mode])
        batches = doctor.watch(batches)
    for _step, (x, y) in zip(range(steps), batches, strict=False):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if mode != "bare":
            doctor.after_backward(loss)
        optimizer.step()
    loop = time.perf_counter() - start
    if mode == "bare":
        return loop, 0.0, None
    start = time.perf_counter()
    report = doctor.report()
    return loop, time.perf_counter() - start, report.cost


def overhead(data, what: str, steps: int, width: int, batch: int) -> None:
    """Print the doctor's cost on this loop, under its budget and watching every step, beside the bare loop."""
    user_loop(data, "budget", steps, width, batch)  # first-use imports and caches, not timed
    order = list(MODES)
    loops = {mode: [] for mode in order}
    reports, costs = [], []
    for repeat in range(REPEATS):
        # The host's load drifts over seconds: each round's three runs share it, in turn first.
        for mode in order[repeat % 3 :] + order[: repeat % 3]:
            loop, report, cost = user_loop(data, mode, steps, width, batch)
            loops[mode].append(loop)
            if mode == "budget":
                reports.append(report)
                costs.append(cost)
    bare = loops["bare"]
    ratio = {mode: statistics.median(w / b for b, w in zip(bare, loops[mode], strict=True)) for mode in MODES}
    cost = costs[len(costs) // 2]
    print(
        f"1. {what}, {steps} steps of {1000 * statistics.median(bare) / steps:.2f} ms: under the budget"
        f" {ratio['budget']:.3f}x, every step watched {ratio['every step']:.3f}x (medians of {REPEATS} rounds;"
        f" goal <= {GOAL}: {'met' if ratio['budget'] <= GOAL else 'MISSED'}); the budget watched"
        f" {statistics.median(c.watched_steps for c in costs):.0f} of {steps} steps in full, its own measure"
        f" {100 * statistics.median(c.share for c in costs):.1f}% (e.g. {cost.line()}); the report after it:"
        f" {statistics.median(reports):.3f} s"
    )


def main() -> None:
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    print(f"machine: torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}")
    overhead(data, "doctor on the digits MLP (widths 64, 64; batches of 64)", 600, 64, 64)
    overhead(data, "the same, a longer run", 3000, 64, 64)
    overhead(data, "doctor on a wider MLP (widths 1024, 1024; batches of 128)", 200, 1024, 128)
    for name in ("healthy_cnn", "starved_loader"):
        recipe = load(ROOT / "examples" / f"{name}.py")
        times = []
        for _ in range(3):
            start = time.perf_counter()
            verdict = run(recipe, force_probe=True).verdict
            times.append(time.perf_counter() - start)
        steps = getattr(recipe, "STEPS", 300)
        seconds = statistics.median(times)
        print(f"2. probe mode, examples/{name}.py ({steps} steps, CPU): verdict {verdict} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
