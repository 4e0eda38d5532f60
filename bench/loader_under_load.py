"""Benchmark of the loader verdict on a busy host: one process burning every core beside the doctor.

One CPU-burning process per core runs beside the doctor (each ends by itself after BURN_LIMIT_S, and is killed at
the end, Ctrl-C included). Under that load the doctor runs, each time in a fresh process, on two recipes, taking
turns so that the host's drift falls on both alike:

- examples/starved_loader.py: a healthy CNN whose DataLoader (no workers) sleeps 0.2 ms per example, as reading
  and decoding an image file would: it should be called starved_loader every time;
- examples/healthy_cnn.py: the same CNN fed by an in-memory DataLoader (no workers): never starved_loader.

It prints, for each recipe, how many runs of N were called starved_loader, how many left the loader unmeasured
(the checklist's "[n/a] the loader keeps up"), and the median, lowest and highest of the measured wait ratios
(`data_wait_ratio`, seconds waited per second of the loop's own compute) beside the rules' threshold. About 20
minutes on the 2-core machine with the defaults.

The doctor's runs use one intra-op thread by default (`--threads 0`: torch's own choice, two here): beside a
burner on every core, torch's intra-op threads spin at every operation's barrier for whichever of them is off
its CPU, and one run of the starved example took 7 minutes instead of 20 seconds (its verdict was the same).

    python bench/loader_under_load.py            # N=10 of each
    python bench/loader_under_load.py --runs 3   # a quicker look
    python bench/loader_under_load.py --burners 0  # the same on the host as it is
    python bench/loader_under_load.py --threads 0 --runs 2  # torch's own thread count (slow under the burners)

Run it with `make bench-loader`. Not a test: what it measures is this machine's scheduling.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {
    "starved": ROOT / "examples" / "starved_loader.py",
    "healthy in-memory": ROOT / "examples" / "healthy_cnn.py",
}
BURN_LIMIT_S = 3600  # a burner left behind by a killed bench ends by itself
BURN = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


def burners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN.format(limit=BURN_LIMIT_S)]) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def doctor_run(recipe: Path, folder: Path, threads: int | None) -> dict:
    """One run of the doctor on `recipe` in a fresh process: its verdict, wait ratio, threshold and loader line."""
    out = folder / "report.json"
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    command = [sys.executable, "-m", "doctor", str(recipe), "--json", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the doctor failed on {recipe.name} ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(out.read_text())
    loader = next(c for c in report["bigger_machine"]["checks"] if c["check"] == "the loader keeps up")
    return {
        "verdict": report["verdict"],
        "ratio": report["features"]["data_wait_ratio"],
        "unmeasured": loader["ok"] is None,
        "detail": loader["detail"],
    }


def summary(name: str, runs: list[dict]) -> str:
    ratios = [r["ratio"] for r in runs if r["ratio"] == r["ratio"]]  # NaN: not measured
    starved = sum(r["verdict"] == "starved_loader" for r in runs)
    shown = (
        f"median {statistics.median(ratios):.3g} (lowest {min(ratios):.3g}, highest {max(ratios):.3g})"
        if ratios
        else "none measured"
    )
    return (
        f"{name:>18}: starved_loader in {starved} of {len(runs)} runs; loader not measured in "
        f"{sum(r['unmeasured'] for r in runs)}; wait ratio {shown}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each recipe (default 10)")
    parser.add_argument("--burners", type=int, default=os.cpu_count(), help="CPU burners (default: one per core)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch's intra-op threads in the doctor's runs (default 1; 0: torch's)"
    )
    args = parser.parse_args()
    runs = {name: [] for name in RECIPES}
    started = time.perf_counter()
    load = burners(args.burners)
    try:
        time.sleep(1.0)  # the burners running before the first run starts
        with tempfile.TemporaryDirectory() as folder:
            for repeat in range(args.runs):
                for name, recipe in RECIPES.items():
                    run = doctor_run(recipe, Path(folder), args.threads)
                    runs[name].append(run)
                    print(
                        f"run {repeat + 1} {name}: {run['verdict']}, wait ratio {run['ratio']:.3g}, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        stop(load)
    print(
        f"\n{args.burners} CPU burners on {os.cpu_count()} cores, {args.runs} runs of each recipe, "
        f"intra-op threads {args.threads or 'torch default'}, "
        f"{time.perf_counter() - started:.0f} s:"
    )
    for name in RECIPES:
        print(summary(name, runs[name]))
    print(f"  (the rules call a wait ratio over {threshold(runs)} starved)")


def threshold(runs: dict) -> str:
    """The starved threshold the reports quoted (the rules' at the runs' step budget)."""
    details = [r["detail"] for group in runs.values() for r in group]
    quoted = {d.split("the rules call ")[1].split(" starved")[0] for d in details if "the rules call " in d}
    return ", ".join(sorted(quoted)) or "?"


if __name__ == "__main__":
    main()
