"""A records folder as users leave it: foreign, truncated or copied files, no write access, two sweeps, Ctrl-C.

Most tests call `harness.sweep.run_cells` in this process with one job (joblib then runs the cells here, one
after the other), on cells of the short recipe; three go through the real entry point, where the exit status
and the absence of a traceback are the point.
"""

import fcntl
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SHORT, make_config, run_entry
from omegaconf import OmegaConf

import harness.records as record_io
import harness.sweep as sweep_module
from analysis.load import load_records
from harness.checks import ConfigError
from harness.recipe import cell_id
from harness.records import (
    SCHEMA,
    SCHEMA_ID,
    cell_lock,
    empty_record,
    lock_path,
    record_status,
    scan_folder,
    write_record,
)
from harness.sweep import run_and_save, run_cells


def grid(records, *overrides):
    """Two short cells (healthy on digits and on synthetic) writing into `records`."""
    return [
        make_config(*SHORT, "fault=healthy", f"dataset={name}", f"run.records={records}", *overrides)
        for name in ("digits", "synthetic")
    ]


def sweep(cells) -> tuple[str, object]:
    """Run the cells here, one job; returns what the sweep printed and its counts."""
    out = io.StringIO()
    counts = run_cells(cells, n_jobs=1, out=out)
    return out.getvalue(), counts


def fake_record(key: str, **values) -> dict:
    """A record of this schema with only the columns that identify it filled in: cheap, and enough to scan."""
    return {**empty_record(), "cell_id": key, "status": "ok", "schema_id": SCHEMA_ID, **values}


def truncate(path, keep: int = 2000) -> None:
    path.write_bytes(path.read_bytes()[:keep])  # what a full disk or a copy cut short leaves


def test_the_scan_names_every_entry_a_parquet_reader_would_trip_on_from_footers_only(records, monkeypatch):
    write_record(fake_record("a"), records)
    shutil.copy(records / "a.parquet", records / "copy.parquet")
    pq.write_table(pa.table({"x": [1]}), records / "foreign.parquet")
    shutil.copy(records / "a.parquet", records / "torn.parquet")
    truncate(records / "torn.parquet")
    pq.write_table(pa.Table.from_pylist([fake_record("b"), fake_record("c")], schema=SCHEMA), records / "all.parquet")
    older = pa.schema(
        [f for f in SCHEMA if f.name != "checkpoints"], metadata={b"schema_id": b"older"}
    )  # a record written before a column came
    pq.write_table(pa.Table.from_pylist([fake_record("d", schema_id="older")], schema=older), records / "d.parquet")
    (records / "notes.txt").write_text("what I ran")
    (records / "plots").mkdir()
    for skipped in (".x.lock", "_SUCCESS", ".a.parquet.123.tmp"):  # every parquet reader skips these names
        (records / skipped).write_bytes(b"")
    (records / ".quarantine").mkdir()

    def no_table_reads(*args, **kwargs):
        raise AssertionError("the scan reads whole tables")

    monkeypatch.setattr(record_io.pq, "read_table", no_table_reads)
    scan = scan_folder(records)
    assert scan.records == ["a.parquet"] and scan.older == ["d.parquet"]
    assert scan.foreign == {
        "all.parquet": "2 rows, where a record has one",
        "copy.parquet": "holds the record of a",
        "foreign.parquet": "not a record",
        "notes.txt": "not a parquet file",
        "plots": "a folder (parquet readers read it too)",
        "torn.parquet": "unreadable",
    }
    assert scan_folder(records / "absent") == record_io.FolderScan()


def test_after_a_column_is_declared_the_sweep_the_scan_and_load_records_all_see_the_old_record_as_older(
    records, monkeypatch
):
    # The trap of a hand-kept version number: a column declared without raising it was never measured (the sweep
    # said "already done"). The id now follows the declarations, and all three read it the same way.
    write_record(fake_record("a", fault="healthy", faults=["healthy"], verdicts=["healthy"]), records)
    assert record_status(records, "a") == "ok"
    added = record_io.Column("throwaway_reading", "float64", "a reading declared since")
    monkeypatch.setattr(record_io, "SCHEMA_ID", record_io.schema_id([*record_io.DECLARED, added]))
    assert record_status(records, "a") is None  # not done: the sweep measures it again
    assert scan_folder(records).older == ["a.parquet"]
    with pytest.warns(UserWarning, match="1 record.*older schema"):
        assert load_records(records).cell_id.tolist() == ["a"]


def test_another_cells_record_under_a_cells_name_does_not_make_it_done(records):
    write_record(fake_record("b"), records)
    shutil.copy(records / "b.parquet", records / "a.parquet")
    assert record_status(records, "b") == "ok" and record_status(records, "a") is None


@pytest.mark.slow
def test_foreign_and_truncated_files_are_named_the_sweeps_own_rewritten_and_the_advice_works(records):
    cells = grid(records)
    first, counts = sweep(cells)
    assert counts["ok"] == 2 and f"records: {records}  (pandas.read_parquet({str(records)!r}))" in first
    mine = records / f"{cell_id(cells[0])}.parquet"
    truncate(mine)  # a cell of this grid: it must run again, not count as done
    pq.write_table(pa.table({"x": [1, 2]}), records / "foreign.parquet")
    shutil.copy(records / f"{cell_id(cells[1])}.parquet", records / "old.parquet")
    truncate(records / "old.parquet")

    second, counts = sweep(cells)
    assert "ran 1 (ok 1, failed 0), already done 1" in second
    assert f"  rewritten (cells of this grid, run again): 1 file: {mine.name} (unreadable)\n" in second
    assert (
        "  not records: 2 files: foreign.parquet (not a record), old.parquet (unreadable); "
        f"run.quarantine=true moves them to {records / '.quarantine'}\n"
    ) in second
    assert f"records: {records}  (analysis.load.load_records({str(records)!r});" in second
    assert "pandas.read_parquet(" not in second  # the one advice that would fail here
    with pytest.raises(pa.ArrowInvalid):
        pd.read_parquet(records)
    with pytest.warns(UserWarning, match="old.parquet"):
        assert sorted(load_records(records).cell_id) == sorted(map(cell_id, cells))

    third, counts = sweep(grid(records, "run.quarantine=true"))
    assert "ran 0 (ok 0, failed 0), already done 2" in third
    quarantined = records / ".quarantine"
    assert f"  moved to {quarantined}: 2 files: foreign.parquet (not a record), old.parquet (unreadable)\n" in third
    assert f"records: {records}  (pandas.read_parquet({str(records)!r}))" in third and "not records" not in third
    assert sorted(p.name for p in quarantined.iterdir()) == ["foreign.parquet", "old.parquet"]
    assert sorted(pd.read_parquet(records).cell_id) == sorted(map(cell_id, cells))


def test_a_folder_that_cannot_be_written_stops_the_sweep_before_any_cell_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the records folder's parent should be")
    records = blocker / "records"
    ran = []
    monkeypatch.setattr(sweep_module, "run_and_save", lambda cfg, recheck=False: ran.append(cfg))
    out = io.StringIO()
    with pytest.raises(ConfigError) as refused:  # an exception for the caller, not an exit: the command line exits 2
        run_cells(grid(records), n_jobs=1, out=out)
    assert ran == [] and out.getvalue() == ""
    assert refused.value.lines == (f"records folder {records} cannot be written: {blocker} is a file, not a folder",)


def test_datasets_that_cannot_be_split_stop_the_sweep_with_one_line_each_before_any_cell_runs(records, monkeypatch):
    ran = []
    monkeypatch.setattr(sweep_module, "run_and_save", lambda cfg, recheck=False: ran.append(cfg))
    cells = grid(records)
    for cell, loader in zip(cells, ("one_lonely_example", "nan_features"), strict=True):
        OmegaConf.set_struct(cell, False)
        cell.dataset = {"name": loader, "loader": {"_target_": f"bad_datasets.{loader}"}}
    with pytest.raises(ConfigError) as refused:
        run_cells(cells, n_jobs=1, out=io.StringIO())
    assert ran == [] and not list(records.glob("*.parquet"))
    lines = refused.value.lines
    assert [line.split(":")[0] for line in lines] == ["dataset one_lonely_example", "dataset nan_features"], lines
    assert str(refused.value) == "\n".join(lines)


@pytest.mark.slow
def test_an_unwritable_records_folder_is_one_line_and_exit_2_from_a_sweep_and_from_one_cell(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    line = f"error: records folder {blocker / 'records'} cannot be written: {blocker} is a file, not a folder"
    for command in (["+sweep=smoke"], SHORT):
        result = run_entry(*command, f"run.records={blocker / 'records'}")
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == line and not result.stdout


def test_a_cell_another_process_holds_the_lock_of_is_left_to_it_and_said_so(records):
    cells = grid(records)
    held = cell_id(cells[0])
    records.mkdir()
    with open(lock_path(records, held), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the worker of another sweep holds it
        (records / ".gone.lock").write_text("")  # left by a killed worker: nobody holds it
        output, counts = sweep(cells)
        assert counts["elsewhere"] == 1 and counts["ok"] == 1
        assert "ran 1 (ok 1, failed 0), already done 0, skipped 0, running elsewhere 1" in output
        assert f"  running elsewhere: 1 cell ({held}) is being run by another sweep into the same folder" in output
        assert not (records / f"{held}.parquet").exists()
        assert [p.name for p in records.glob(".*.lock")] == [f".{held}.lock"]  # the held one stays, untouched
    again, counts = sweep(cells)
    assert "ran 1 (ok 1, failed 0), already done 1, skipped 0\n" in again
    assert not list(records.glob(".*.lock"))


def test_a_cell_another_sweep_finished_after_the_parent_looked_is_not_run_again(records, monkeypatch):
    import harness.cell

    cfg = grid(records)[0]
    write_record(fake_record(cell_id(cfg)), records)  # the other sweep's record, whole
    monkeypatch.setattr(harness.cell, "run_cell", lambda cfg: pytest.fail("the cell ran again"))
    assert run_and_save(cfg, recheck=True)["status"] == "done"
    with cell_lock(records, cell_id(cfg)) as taken:
        assert taken  # released by run_and_save
        with cell_lock(records, cell_id(cfg)) as second:
            assert not second  # a lock is one holder's, even within one process


@pytest.mark.slow
def test_two_sweeps_into_one_folder_run_every_cell_once(records):
    # One job each: the cells run in each sweep's own process, in the grid's order, so the two meet at every
    # cell; cells of about a second, so that they run side by side even when one sweep starts late.
    grid = ["+sweep=smoke", f"run.records={records}", "hydra.sweeper.n_jobs=1", "loop.steps=300"]
    command = [sys.executable, "-m", "harness", *grid]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sweeps = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [s.communicate(timeout=300)[1] for s in sweeps]
    assert [s.returncode for s in sweeps] == [0, 0], outputs
    counts = []
    for output in outputs:
        found = re.search(r"ran (\d+) .*already done (\d+), skipped 0(?:, running elsewhere (\d+))?\n", output)
        assert found, output
        counts.append([int(n or 0) for n in found.groups()])
    assert sum(ran for ran, _, _ in counts) == 4, outputs  # each cell ran in one sweep only
    assert all(sum(c) == 4 for c in counts), outputs  # and each sweep accounts for every cell
    assert sorted(pd.read_parquet(records).status) == ["ok"] * 4
    assert not list(records.glob(".*.lock"))


@pytest.mark.slow
def test_ctrl_c_ends_a_sweep_with_its_summary_and_exit_130(records):
    grid = ["+sweep=smoke", f"run.records={records}", "seed=range(2)", "loop.steps=400"]  # 8 cells of about 0.5 s
    process = subprocess.Popen(
        [sys.executable, "-m", "harness", *grid],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A child inherits an ignored SIGINT, and Python then never raises KeyboardInterrupt: in the full suite
        # something before this test leaves pytest's own SIGINT ignored (seen in two fresh-clone CI runs).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while not list(records.glob("*.parquet")) and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # this process only: `kill -INT`; test_sweep.py sends it to the group
    output = process.communicate(timeout=60)[1]
    assert process.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert "sweep (interrupted): 8 cells in " in output
    kept = len(list(records.glob("*.parquet")))
    assert 1 <= kept < 8, "interrupt the sweep while it runs"
    line = f"interrupted: {kept} of 8 cells finished and are kept; run the same command again to resume"
    assert line in output
    assert len(pd.read_parquet(records)) == kept and not list(records.glob(".*.tmp"))
