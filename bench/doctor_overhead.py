"""Benchmark of the doctor, measured side by side in one run.

1. Overhead on a user's loop: the grid's digits MLP, 600 steps, as a plain loop and with the doctor's three
   lines (the report at the end timed apart: it adds the memorization probe and the evaluations).
2. Time to a verdict in probe mode on the CPU, for the example recipes.

Run it with `make bench-doctor`. Medians of interleaved runs; only ratios within one run are worth quoting.
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
STEPS, REPEATS = 600, 7


def user_loop(data, with_doctor: bool) -> tuple[float, float]:
    """Seconds of the 600-step loop, and of the report after it (0 without the doctor)."""
    torch.manual_seed(0)
    model = MLP(data.x_train.shape[1], data.n_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    batches = training_batches(data.x_train, data.y_train, 64, seed=0)
    start = time.perf_counter()
    if with_doctor:
        doctor = Doctor(model, optimizer, loss_fn, validation=[(data.x_val, data.y_val)])
        batches = doctor.watch(batches)
    for _step, (x, y) in zip(range(STEPS), batches, strict=False):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if with_doctor:
            doctor.after_backward(loss)
        optimizer.step()
    loop = time.perf_counter() - start
    if not with_doctor:
        return loop, 0.0
    start = time.perf_counter()
    doctor.report()
    return loop, time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    user_loop(data, True)  # first-use imports, not timed
    bare, watched, reports = [], [], []
    for _ in range(REPEATS):
        bare.append(user_loop(data, False)[0])
        loop, report = user_loop(data, True)
        watched.append(loop)
        reports.append(report)
    ratio = statistics.median(watched) / statistics.median(bare)
    print(f"machine: torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}")
    print(
        f"1. doctor on the user's loop (digits MLP, {STEPS} steps): {statistics.median(watched):.3f} s / "
        f"{statistics.median(bare):.3f} s = {ratio:.3f}x (goal <= 1.15: {'met' if ratio <= 1.15 else 'MISSED'}); "
        f"the report after it: {statistics.median(reports):.3f} s"
    )
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
