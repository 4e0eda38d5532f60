"""Benchmark of `import doctor`: how long it takes, against `import torch` alone, and what it loads.

Each import runs in a fresh Python process (the interpreter caches modules, so a second import in one process
costs nothing), timed inside that process from just before the import to just after it. The processes take
turns: torch, then the doctor of each source tree given, REPEATS rounds, so a loaded host slows them alike; the
figure to quote is the median, and the ratio of the doctor's median to torch's within this run.

    python bench/import_time.py                  # this checkout
    python bench/import_time.py /tmp/before .    # an older checkout (a `git worktree`) beside this one

It also lists which of the libraries the doctor should not need to start (HEAVY) are loaded after the import.
Run it with `make bench-import`.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

REPEATS = 9
HEAVY = ("pandas", "pyarrow", "omegaconf", "hydra", "sklearn", "scipy", "matplotlib")
# The child prints the seconds the import took and which HEAVY libraries it loaded, as one JSON line.
CHILD = """
import json, sys, time
start = time.perf_counter()
import {module}
seconds = time.perf_counter() - start
print(json.dumps([seconds, [m for m in {heavy!r} if m in sys.modules]]))
"""


def timed_import(module: str, root: Path) -> tuple[float, list[str]]:
    """Seconds `import module` took in a fresh interpreter started in `root`, and the HEAVY libraries it loaded."""
    code = CHILD.format(module=module, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    seconds, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return seconds, loaded


def main(roots: list[Path]) -> None:
    """Take turns importing torch and the doctor of each root; print medians, ratios and the heavy libraries."""
    timings: dict[str, list[float]] = {"torch": []} | {f"doctor in {root}": [] for root in roots}
    loaded: dict[str, list[str]] = {}
    for _ in range(REPEATS):
        timings["torch"].append(timed_import("torch", roots[0])[0])
        for root in roots:
            seconds, loaded[str(root)] = timed_import("doctor", root)
            timings[f"doctor in {root}"].append(seconds)
    torch_median = statistics.median(timings["torch"])
    print(f"{REPEATS} rounds, each import in a fresh process, in turn")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"import {name}: median {median:.3f} s ({median / torch_median:.2f}x torch's)")
    for root in roots:
        print(f"loaded by import doctor in {root}: {', '.join(loaded[str(root)]) or 'none of ' + ', '.join(HEAVY)}")
    if len(roots) == 2:
        before, after = (statistics.median(timings[f"doctor in {root}"]) for root in roots)
        print(f"import doctor, {roots[1]} over {roots[0]}: {after / before:.2f}")


if __name__ == "__main__":
    main([Path(arg).resolve() for arg in sys.argv[1:]] or [Path(__file__).resolve().parent.parent])
