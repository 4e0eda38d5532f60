"""The device study: its CPU cells, its CUDA cells on a machine without CUDA, and the crossover analysis."""

import subprocess
import sys

import pandas as pd
import pytest
import torch
from conftest import ROOT, make_config, run_entry

from analysis.devices import crossover, study_table, summary
from analysis.load import load_records
from analysis.sections import device_section
from harness.cell import run_cell

TINY = ["+sweep=devices", "model.hidden=[32,32]", "data.batch_size=64", "loop.steps=20", "loop.timing_warmup=5"]


@pytest.mark.slow
def test_a_cpu_cell_of_the_study_times_its_steps():
    record = run_cell(make_config(*TINY, "device=cpu"))
    assert record["status"] == "ok", record["error"]
    assert 0 < record["step_time_s"] < 1 and 0 <= record["copy_share"] < 0.5
    assert record["gpu_busy_share"] != record["gpu_busy_share"]  # NaN: no GPU
    assert record["peak_memory_bytes"] > 10 * 2**20 and record["threads"] == torch.get_num_threads()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_the_study_runs_its_cpu_cells_and_says_no_gpu_figures_exist(records):
    result = run_entry(*TINY, f"run.records={records}")
    assert result.returncode == 0, result.stderr
    assert "ran 1 (ok 1, failed 0), already done 0, skipped 1" in result.stderr
    report = subprocess.run(
        [sys.executable, "-m", "analysis", "devices", str(records)], cwd=ROOT, capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout.strip().splitlines()[-1].startswith("no GPU figures exist yet: device=cuda asked for")
    table = study_table(load_records(records))
    assert set(table.device) == {"cpu", "cuda"} and table.width.tolist() == [32, 32]
    out = records.parent / "report"
    out.mkdir()
    text = device_section(records, out)  # the report's section draws the study's figure (analysis/plots.py)
    assert text[0] == "## When does a GPU pay?" and "![device study](device_study.png)" in text
    assert (out / "device_study.png").stat().st_size > 1000


def test_crossover_finds_the_smallest_width_where_the_gpu_wins():
    rows = []
    for batch, cpu_ms, cuda_ms in [(64, [1, 4, 30], [2, 3, 3]), (1024, [5, 50, 800], [2, 3, 10])]:
        for width, cpu, cuda in zip([64, 256, 1024], cpu_ms, cuda_ms, strict=True):
            rows += [
                {"device": "cpu", "width": width, "batch_size": batch, "status": "ok", "step_ms": cpu, "val_acc": 0.9},
                {
                    "device": "cuda",
                    "width": width,
                    "batch_size": batch,
                    "status": "ok",
                    "step_ms": cuda,
                    "val_acc": 0.9,
                },
            ]
    table = crossover(pd.DataFrame(rows))
    assert table.loc[64, "GPU wins from width"] == 256 and table.loc[64, "speed-up there"] == "1.3x"
    assert (
        table.loc[1024, "GPU wins from width"] == 64 and table.loc[1024, "speed-up at widest"] == "80.0x (width 1024)"
    )
    frame = pd.DataFrame(rows).assign(
        error=None, device_name="test", threads=1, copy_share=0.0, data_wait_share=0.0, gpu_busy_share=0.5, peak_mib=1.0
    )
    text = summary(frame).splitlines()
    assert "crossover:" in text and text[-1].split()[0] == "1024"
    assert "largest CPU-GPU difference in final validation accuracy: 0.000" in text


def test_the_doctor_quotes_the_device_study_where_it_exists(tmp_path):
    from doctor.machine import device_study_line
    from harness.records import SCHEMA_ID, empty_record, write_record

    assert f"no device study in {tmp_path / 'none'} yet" in device_study_line(tmp_path / "none")
    for device, width, milliseconds in [("cpu", 64, 1.0), ("cuda", 64, 2.0), ("cpu", 1024, 40.0), ("cuda", 1024, 4.0)]:
        recipe = f"model:\n  hidden: [{width}, {width}]\ndata:\n  batch_size: 256\n"
        write_record(
            {
                **empty_record(),
                "cell_id": f"{device}{width}",
                "device": device,
                "status": "ok",
                "schema_id": SCHEMA_ID,
                "config_yaml": recipe,
                "step_time_s": milliseconds / 1000,
                "final_val_acc": 0.9,
            },
            tmp_path,
        )
    assert device_study_line(tmp_path).endswith("found the GPU faster on the digits MLP at batch 256: from width 1024")
