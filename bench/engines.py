"""Benchmark of the engines: the same 100-cell grid on a local Dask cluster against the joblib (loky) default.

Both run through the real entry point with as many workers as this machine has cores, one after the other in
this one run; the ratio of their wall times (launch to exit) is the Dask path's overhead. The grid is the
first ten conditions x 5 seeds x 2 datasets, as in bench/grid.py. Run it with `make bench-engines` (about 3
minutes on 2 cores); the machines are shared and noisy, so only the ratio within one run is worth quoting.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid import CORES, FAULTS, GRID_CELLS, ROOT


def sweep_seconds(records: Path, *engine: str) -> float:
    command = [sys.executable, "-m", "harness", "+sweep=default", f"fault={FAULTS}", f"run.records={records}"]
    start = time.perf_counter()
    subprocess.run([*command, f"hydra.sweeper.n_jobs={CORES}", *engine], cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    frame = pd.read_parquet(records)
    assert len(frame) == GRID_CELLS and (frame.status == "ok").all(), f"the grid must give {GRID_CELLS} ok records"
    return wall


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        loky = sweep_seconds(Path(scratch) / "loky")
        dask = sweep_seconds(Path(scratch) / "dask", "hydra.sweeper.backend=dask")
    ratio = dask / loky
    print(f"{GRID_CELLS} cells on {CORES} workers: local Dask cluster {dask:.1f} s, loky {loky:.1f} s")
    print(f"dask / loky: {ratio:.2f}x (goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'})")


if __name__ == "__main__":
    main()
