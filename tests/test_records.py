"""Records: the schema round-trips through parquet, and writes are atomic."""

import math
import os
import subprocess
import sys
import threading
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import SHORT, make_config

import harness.records as record_io
from harness.cell import run_cell
from harness.records import SCHEMA, SCHEMA_ID, record_status, remove_stale_temporaries, write_record


@pytest.fixture(scope="module")
def record():
    return run_cell(make_config(*SHORT, "fault=frozen_params"))


def test_schema_round_trips_through_pandas(record, records):
    path = write_record(record, records)
    assert path.name == f"{record['cell_id']}.parquet"
    frame = pd.read_parquet(records)
    assert list(frame.columns) == SCHEMA.names and len(frame) == 1
    row = frame.iloc[0]
    for name, value in record.items():
        stored = row[name]
        if isinstance(value, list) and value and isinstance(value[0], dict):  # the snapshots per budget
            for saved, snapshot in zip(stored, value, strict=True):
                assert saved == pytest.approx(snapshot, nan_ok=True), name
        elif isinstance(value, list):
            assert list(stored) == (
                pytest.approx(value, nan_ok=True) if value and isinstance(value[0], float) else value
            )
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            assert pd.isna(stored), name
        elif name == "started_at":
            assert stored == pd.Timestamp(value)
        else:
            assert stored == value, name
    assert pq.read_schema(path).metadata[b"schema_id"] == SCHEMA_ID.encode()
    assert record_status(records, record["cell_id"]) == "ok"


def test_a_grid_folder_loads_in_one_call_and_skips_temporaries(record, records):
    write_record(record, records)
    write_record({**record, "cell_id": "other", "status": "failed", "error": "boom"}, records)
    (records / ".half-written.parquet.12345.tmp").write_bytes(b"PAR1 not a whole file")
    frame = pd.read_parquet(records)
    assert sorted(frame.cell_id) == sorted([record["cell_id"], "other"])


def test_write_refuses_records_that_do_not_match_the_schema(record, records):
    with pytest.raises(KeyError, match="extra"):
        write_record({**record, "surprise": 1}, records)
    partial = dict(record)
    partial.pop("first_loss")
    with pytest.raises(KeyError, match="missing"):
        write_record(partial, records)


def test_a_write_that_dies_midway_leaves_no_readable_partial_file(record, records, monkeypatch):
    write_record(record, records)
    before = (records / f"{record['cell_id']}.parquet").read_bytes()

    def dies_halfway(table, sink, **kwargs):
        sink.write(b"PAR1 half of a file")
        raise OSError("disk full")

    monkeypatch.setattr(record_io.pq, "write_table", dies_halfway)
    with pytest.raises(OSError, match="disk full"):
        write_record({**record, "wall_s": 99.0}, records)
    assert (records / f"{record['cell_id']}.parquet").read_bytes() == before  # the old record, whole
    assert [p.name for p in records.iterdir()] == [f"{record['cell_id']}.parquet"]  # no temporary left
    assert len(pd.read_parquet(records)) == 1


def test_stale_temporaries_of_dead_writers_are_removed(records):
    records.mkdir()
    dead = records / ".cell.parquet.999999999.tmp"  # no such process
    alive = records / f".cell.parquet.{os.getpid()}.tmp"
    dead.write_bytes(b"x")
    alive.write_bytes(b"x")
    assert remove_stale_temporaries(records) == 1
    assert not dead.exists() and alive.exists()


def test_a_record_of_another_schema_counts_as_none(record, records):
    write_record({**record, "schema_id": "an older schema"}, records)
    assert record_status(records, record["cell_id"]) is None


def test_status_of_a_missing_or_unreadable_record_is_none(records):
    records.mkdir()
    assert record_status(records, "nothing") is None
    (records / "broken.parquet").write_bytes(b"not parquet")
    assert record_status(records, "broken") is None


def test_after_ctrl_c_a_worker_killed_while_writing_leaves_no_temporary(records):
    """A killed writer's temporary goes once its process is gone; the sweep waits a moment for that, no longer."""
    from harness.sweep import _clear_after_interrupt

    records.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed = records / f".cell.parquet.{writer.pid}.tmp"  # the worker's half-written record
    killed.write_bytes(b"x")
    alive = records / f".other.parquet.{os.getpid()}.tmp"  # a writer still running: kept
    alive.write_bytes(b"x")
    threading.Timer(0.3, lambda: (writer.kill(), writer.wait())).start()  # killed after the sweep began waiting
    started = time.monotonic()
    _clear_after_interrupt([str(records)], wait_s=1.0)
    assert not killed.exists() and alive.exists()
    assert time.monotonic() - started >= 1.0  # the live writer's file kept it waiting to the end, and no longer
