"""Sweeps through the real entry point: end to end, resume, interruption, reruns, failed and skipped cells."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from conftest import ROOT, SHORT, make_config, run_entry

from harness.cell import run_cell


def mtimes(folder):
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")}


@pytest.mark.slow
def test_smoke_sweep_end_to_end_then_resume_then_force(records):
    first = run_entry("+sweep=smoke", f"run.records={records}")
    assert first.returncode == 0, first.stderr
    assert "sweep: 4 cells" in first.stderr and "ran 4 (ok 4, failed 0)" in first.stderr
    assert "cells: 100%|" in first.stderr and "4/4" in first.stderr  # the progress bar
    frame = pd.read_parquet(records)
    assert len(frame) == 4 and set(frame.status) == {"ok"}
    assert set(frame.fault) == {"healthy", "no_zero_grad"} and set(frame.dataset) == {"digits", "synthetic"}
    assert frame.cell_id.is_unique
    written = mtimes(records)

    again = run_entry("+sweep=smoke", f"run.records={records}")
    assert again.returncode == 0 and "ran 0" in again.stderr and "already done 4" in again.stderr
    assert "Warning" not in again.stderr
    assert mtimes(records) == written

    lost = sorted(written)[:2]
    for name in lost:
        (records / name).unlink()
    (records / ".lost.parquet.999999999.tmp").write_bytes(b"PAR1 torn")  # left by a killed writer
    resumed = run_entry("+sweep=smoke", f"run.records={records}")
    assert resumed.returncode == 0 and "ran 2 (ok 2, failed 0), already done 2" in resumed.stderr
    now = mtimes(records)
    assert set(now) == set(written) and all(now[n] == written[n] for n in set(written) - set(lost))
    assert not list(records.glob(".*.tmp"))

    forced = run_entry("+sweep=smoke", f"run.records={records}", "run.force=true")
    assert forced.returncode == 0 and "ran 4" in forced.stderr


# Ctrl-C and a crash take the same path back (the records on disk decide what is done); the crash is the harder
# case and runs by default, Ctrl-C only with `make test-all`, keeping `make test` under 5 minutes on 2 cores.
@pytest.mark.slow
@pytest.mark.parametrize(
    "how", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGKILL], ids=["ctrl-c", "crash"]
)
def test_an_interrupted_sweep_loses_nothing_and_resumes(records, how, tmp_path):
    grid = ["+sweep=smoke", f"run.records={records}", "seed=range(4)", "loop.steps=400"]  # 16 cells of about 0.5 s
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness", *grid],
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            # A child inherits an ignored SIGINT (a shell's background job, or pytest after some earlier test), and
            # Python then never raises KeyboardInterrupt: the sweep would run on to its end (seen here 2 runs of 7).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    deadline = time.time() + 120
    while len(list(records.glob("*.parquet"))) < 3 and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, how)  # the whole process group, as Ctrl-C in a terminal does
    process.wait(timeout=60)
    while time.time() < deadline:  # its workers too: a user restarts after the sweep is gone, not within ms
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    before = mtimes(records)
    assert 3 <= len(before) < 16, "interrupt the sweep while it runs"
    assert len(pd.read_parquet(records)) == len(before)  # every file there is a whole record
    if how == signal.SIGINT:  # Ctrl-C: the summary of what finished, how to resume, and the shell's status
        output = log.read_text()
        assert process.returncode == 130, output
        assert "sweep (interrupted): 16 cells in " in output and "Traceback" not in output
        resume = "run the same command again to resume"
        assert f"interrupted: {len(before)} of 16 cells finished and are kept; {resume}" in output
    else:
        assert process.returncode == -signal.SIGKILL

    resumed = run_entry(*grid)
    assert resumed.returncode == 0, resumed.stderr
    assert f"ran {16 - len(before)} (ok {16 - len(before)}, failed 0), already done {len(before)}" in resumed.stderr
    after = mtimes(records)
    assert len(after) == 16 and all(after[name] == before[name] for name in before)
    assert not list(records.glob(".*.tmp"))


@pytest.mark.slow
def test_a_failing_cell_is_recorded_and_the_sweep_goes_on(records):
    # The CNN reads a row as a square image: digits' 64 features are one, synthetic's 32 are not.
    result = run_entry("+sweep=smoke", "fault=healthy", "model=cnn", f"run.records={records}")
    assert result.returncode == 1
    assert "ran 2 (ok 1, failed 1)" in result.stderr
    frame = pd.read_parquet(records).set_index("dataset")
    assert frame.loc["synthetic", "status"] == "failed" and "not a perfect square" in frame.loc["synthetic", "error"]
    assert frame.loc["digits", "status"] == "ok" and pd.isna(frame.loc["digits", "error"])
    assert f"failed {frame.loc['synthetic', 'cell_id']}: InstantiationException" in result.stderr


def test_time_limit_and_non_finite_required_values_fail_the_cell():
    slow = run_cell(make_config(*SHORT, "fault=starved_loader", "run.time_limit_s=0.05"))
    assert slow["status"] == "failed" and slow["error"].startswith("CellTimeout")
    broken = run_cell(make_config(*SHORT, "data.input_scale=nan"))
    assert broken["status"] == "failed" and "non-finite required measurement: first_loss" in broken["error"]
    assert broken["wall_s"] > 0 and broken["cell_id"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: see the test below")
def test_cuda_cells_without_cuda_are_recorded_as_skipped(records):
    result = run_entry("+sweep=smoke", "fault=healthy", "dataset=digits", "device=cpu,cuda", f"run.records={records}")
    assert result.returncode == 0, result.stderr
    assert "ran 1 (ok 1, failed 0), already done 0, skipped 1" in result.stderr
    assert "skipped healthy-digits-cuda" in result.stderr and "device=cuda asked for" in result.stderr
    frame = pd.read_parquet(records).set_index("device")
    assert frame.loc["cuda", "status"] == "skipped" and frame.loc["cpu", "status"] == "ok"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_cells_run_on_the_gpu():
    record = run_cell(make_config(*SHORT, "device=cuda"))
    assert record["status"] == "ok" and record["device"] == "cuda" and record["device_name"]


@pytest.mark.slow
def test_the_pairs_sweep_plants_two_faults_per_cell_and_skips_clashing_pairs(records):
    pairs = "hydra.sweeper.pairs=[lr_too_high,lr_too_low,starved_loader,healthy_dropout]"
    result = run_entry("+sweep=pairs", pairs, "seed=0", "dataset=digits", f"run.records={records}", *SHORT)
    assert result.returncode == 0, result.stderr
    frame = pd.read_parquet(records)
    # lr_too_high and lr_too_low both set loop.lr_scale: that pair cannot share a cell
    assert sorted(frame.fault) == [
        "lr_too_high+healthy_dropout",
        "lr_too_high+starved_loader",
        "lr_too_low+healthy_dropout",
        "lr_too_low+starved_loader",
        "starved_loader+healthy_dropout",
    ]
    row = frame.set_index("fault").loc["lr_too_high+starved_loader"]
    assert pd.isna(row.diagnosis) and row.data_wait_share > 0.3
    assert list(row.faults) == list(row.verdicts) == ["lr_too_high", "starved_loader"]
    assert "lr_scale: 100.0" in row.config_yaml


def test_a_pair_whose_model_cannot_be_built_is_left_out():
    from hydra_plugins.doctor_grid_sweeper.grid_sweeper import _model_builds

    mlp = {"model._target_": "harness.model.MLP", "model.name": "mlp", "model.hidden": [64, 64]}
    assert _model_builds({**mlp, "model.frozen_layers": [0, 1]})
    assert not _model_builds({**mlp, "model.hidden": [4], "model.frozen_layers": [0, 1]})


def test_the_sweepers_quick_composition_is_hydras_own_cell_for_cell():
    """A fault choice merged onto the composition without it gives exactly what Hydra composes with it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext
    from omegaconf import OmegaConf

    from hydra_plugins.doctor_grid_sweeper.grid_sweeper import GridSweeper

    params = {
        "fault": "healthy,lr_too_high,mild/dead_relu,extreme/overfitting,[starved_loader,label_noise]",
        "seed": "0,1",
    }
    variants = [["dataset=digits"], ["dataset=zoo/moons2", "optimizer=sgd", "data.batch_size=32"]]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("config", return_hydra_config=True)
        context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=None)
        quick, full = GridSweeper(params=params, variants=variants), GridSweeper(params=params, variants=variants)
        for sweeper in (quick, full):
            sweeper.setup(hydra_context=context, task_function=None, config=config)
        full._fault_file = lambda name: None  # every cell through Hydra's full composition
        cells, reference = quick.compose_cells([]), full.compose_cells([])
    assert len(cells) == 20
    assert [OmegaConf.to_container(c) for c in cells] == [OmegaConf.to_container(c) for c in reference]
    assert {c.severity for c in cells} == {None, "mild", "extreme"} and {c.optimizer._target_ for c in cells} == {
        "torch.optim.Adam",
        "torch.optim.SGD",
    }
