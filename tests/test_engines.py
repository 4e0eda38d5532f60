"""The same grid on a real Dask cluster: the same records as the local default, and no cell lost with a worker."""

import math
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import ROOT, run_entry

distributed = pytest.importorskip("distributed")

# What a cell measures by the clock, or where it ran: everything else must be the same on any engine.
TIMINGS = {
    "started_at",
    "wall_s",
    "data_wait_s",
    "loop_s",
    "data_wait_share",
    "step_time_s",
    "copy_share",
    "gpu_busy_share",
    "peak_memory_bytes",
    "host",
}


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if hasattr(a, "__len__") and not isinstance(a, str):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.slow  # 25 s: Dask is the optional engine; `make test-all` runs it
def test_a_local_dask_cluster_writes_the_same_records_as_loky_cell_for_cell(tmp_path):
    local, cluster = tmp_path / "loky", tmp_path / "dask"
    assert run_entry("+sweep=smoke", f"run.records={local}").returncode == 0
    result = run_entry("+sweep=smoke", f"run.records={cluster}", "hydra.sweeper.backend=dask")
    assert result.returncode == 0, result.stderr
    assert "ran 4 (ok 4, failed 0)" in result.stderr
    a = pd.read_parquet(local).set_index("cell_id").sort_index()
    b = pd.read_parquet(cluster).set_index("cell_id").sort_index()
    assert list(a.index) == list(b.index)
    differ = [c for c in a.columns if c not in TIMINGS and not all(map(same, a[c], b[c]))]
    assert not differ, f"measurements differ between engines: {differ}"


@pytest.mark.slow
def test_a_worker_killed_mid_sweep_loses_no_finished_cell_and_the_rerun_completes(tmp_path):
    records = tmp_path / "records"
    grid = ["+sweep=smoke", "seed=range(4)", "loop.steps=300", f"run.records={records}", "hydra.sweeper.backend=dask"]
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        command = [sys.executable, "-m", "harness", *grid, f"hydra.sweeper.address={cluster.scheduler_address}"]
        sweep = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(records.glob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.2)
        finished = {p.name for p in records.glob("*.parquet")}
        assert finished, "no cell finished within two minutes"
        victim = next(iter(client.run(os.getpid).values()))
        os.kill(victim, signal.SIGKILL)  # a worker lost: its nanny starts a new one, its cell is run again
        _, stderr = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, stderr
    now = {p.name for p in records.glob("*.parquet")}
    # Nothing finished is lost. (A cell whose worker died before Dask heard back may run twice: its record is
    # then written twice, atomically, with the same measurements.)
    assert len(now) == 16 and set(finished) <= now
    assert set(pd.read_parquet(records).status) == {"ok"}
    again = run_entry(*grid)  # a local cluster this time: nothing left to run
    assert again.returncode == 0 and "ran 0" in again.stderr and "already done 16" in again.stderr
