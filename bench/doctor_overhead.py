"""Benchmark of the doctor, measured side by side in one run.

1. Overhead on a user's loop: the grid's digits MLP, 600 steps, as a plain loop and with the doctor's three
   lines (the report at the end timed apart: it adds the memorization probe and the evaluations); whole runs in
   pairs, then the two loops stepped in turn (steps_side_by_side), which a loaded host disturbs far less.
2. Time to a verdict in probe mode on the CPU, for the example recipes.

Run it with `make bench-doctor`. The overhead is the median over pairs of runs side by side (a bare run and a
doctored one, in turn first) of their ratio; only ratios within one run are worth quoting.
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
STEPS, REPEATS, SIDE_BY_SIDE = 600, 15, 7
LOSS = nn.CrossEntropyLoss()
GOAL = 1.05  # the doctor's overhead on this loop of tiny steps, at most (issue 14)


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


def steps_side_by_side(data) -> float:
    """The doctor's overhead with the two loops stepped in turn, each step timed: both share the host's load.

    A bare loop and a doctored one on the same data, one step of each in turn (which goes first alternates); each
    loop's time is the sum of its steps (the doctored one's with the Doctor's construction). Whole runs one after
    the other see the load change between them; steps a millisecond apart do not. The ratio of the sums.
    """

    def start(with_doctor: bool):
        torch.manual_seed(0)
        model = MLP(data.x_train.shape[1], data.n_classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        batches = training_batches(data.x_train, data.y_train, 64, seed=0)
        begin = time.perf_counter()
        doctor = Doctor(model, optimizer, LOSS, validation=[(data.x_val, data.y_val)]) if with_doctor else None
        batches = doctor.watch(batches) if with_doctor else batches
        return [model, optimizer, iter(batches), doctor, time.perf_counter() - begin]

    def step(loop) -> None:
        model, optimizer, batches, doctor, _ = loop
        begin = time.perf_counter()
        x, y = next(batches)
        loss = LOSS(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if doctor is not None:
            doctor.after_backward(loss)
        optimizer.step()
        loop[4] += time.perf_counter() - begin

    bare, watched = start(False), start(True)
    for i in range(STEPS):
        for loop in (bare, watched) if i % 2 else (watched, bare):
            step(loop)
    return watched[4] / bare[4]


def main() -> None:
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    user_loop(data, True)  # first-use imports, not timed
    bare, watched, reports = [], [], []
    for repeat in range(REPEATS):
        # A pair of runs, in turn bare or doctored first: the host's load drifts over seconds, and a pair shares it.
        for with_doctor in (False, True) if repeat % 2 == 0 else (True, False):
            loop, report = user_loop(data, with_doctor)
            (watched if with_doctor else bare).append(loop)
            if with_doctor:
                reports.append(report)
    ratio = statistics.median(w / b for b, w in zip(bare, watched, strict=True))
    fastest = min(watched) / min(bare)
    print(f"machine: torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}")
    print(
        f"1. doctor on the user's loop (digits MLP, {STEPS} steps): {statistics.median(watched):.3f} s /"
        f" {statistics.median(bare):.3f} s, {ratio:.3f}x (median of {REPEATS} pairs; fastest runs {fastest:.3f}x)"
        f" (goal <= {GOAL}: {'met' if ratio <= GOAL else 'MISSED'}); the report after it:"
        f" {statistics.median(reports):.3f} s"
    )
    steps_side_by_side(data)  # warm-up
    ratios = [steps_side_by_side(data) for _ in range(SIDE_BY_SIDE)]
    print(
        f"1. the same, the two loops stepped in turn (median of {SIDE_BY_SIDE} runs):"
        f" {statistics.median(ratios):.3f}x (runs {min(ratios):.3f}x to {max(ratios):.3f}x)"
        f" (goal <= {GOAL}: {'met' if statistics.median(ratios) <= GOAL else 'MISSED'})"
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
