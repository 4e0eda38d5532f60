"""Loading records: one call from a records folder to a pandas DataFrame with the harness's schema."""

import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import RECORD_COLUMNS, SCHEMA, stored_schema_id, written_with_this_schema


class NoRecords(FileNotFoundError):
    """The folder holds no readable record."""


def optional_records(folder: str | Path) -> pd.DataFrame | None:
    """The records of a side study (the device study, the short runs) if the folder holds any, quietly; else None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return load_records(folder)
        except (NoRecords, ValueError):
            return None


def load_records(folder: str | Path) -> pd.DataFrame:
    """Every record in `folder` as one DataFrame (one row per cell, the columns of harness.records.SCHEMA).

    `folder` may also be one record's .parquet file: that record alone.

    Records written with another schema (harness/records.py: `written_with_this_schema`, the test the sweep's
    "already done" applies too) load, with the columns added since left empty (a warning says how many;
    `make sweep` measures them again), but only in a folder that holds no record of the current schema: next to
    current records they are left out (with a warning), because a measurement may mean something else now. Files
    that cannot be read, or are not records of this project, are skipped with a warning naming them; temporary
    files (names starting with "." or "_") are ignored. Duplicate cell ids are refused.
    """
    folder = Path(folder)
    tables, old_tables = _read_tables(folder)
    if old_tables and tables:
        warnings.warn(
            f"{len(old_tables)} record(s) in {folder} were written by an older schema and are left out, "
            f"beside {len(tables)} of the current one; a sweep of their grid measures them again (or delete them)",
            stacklevel=2,
        )
    elif old_tables:
        warnings.warn(
            f"{len(old_tables)} record(s) in {folder} were written by an older schema: the columns added "
            "since are empty; `make sweep` measures those cells again",
            stacklevel=2,
        )
        tables = old_tables
    if not tables and folder.is_file():
        raise NoRecords(f"{folder} is no record of this project: `make sweep` writes one .parquet file per cell")
    if not tables:
        raise NoRecords(f"no records in {folder}: `make sweep RUNS={folder}` produces them")
    frame = pa.concat_tables(tables).to_pandas()
    if tables is old_tables and frame.verdicts.isna().all():  # before version 12 two faults were one `a+b` string
        frame["faults"], frame["verdicts"] = frame.fault.str.split("+"), frame.diagnosis.str.split("+")
        frame["diagnosis"] = frame.diagnosis.where(frame.verdicts.str.len() == 1, None)
    duplicated = frame.cell_id[frame.cell_id.duplicated()].unique()
    if len(duplicated):
        raise ValueError(f"duplicate cell ids in {folder}: {', '.join(map(str, duplicated[:5]))}")
    return frame


def _read_tables(folder: Path) -> tuple[list[pa.Table], list[pa.Table]]:
    """The records of a folder (or one record's file) as tables of SCHEMA: those of this schema, then the older.

    A file that is not a readable record is named in one warning with the others, by why.
    """
    if folder.is_file():  # one record's file: read alone, under the same rules as a folder of one
        paths = [folder]
    elif folder.is_dir():
        paths = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_")))
    else:
        paths = []
    tables, old_tables, skipped = [], [], {}
    for path in paths:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException):
            skipped.setdefault("unreadable", []).append(path.name)
            continue
        if not set(RECORD_COLUMNS) <= set(table.column_names) or stored_schema_id(table.schema.metadata) is None:
            skipped.setdefault("not a record", []).append(path.name)
            continue
        current = written_with_this_schema(table.schema.metadata)
        for name in SCHEMA.names:
            if name not in table.column_names:  # added since this record's schema: empty here
                table = table.append_column(name, pa.nulls(len(table), SCHEMA.field(name).type))
        try:
            (tables if current else old_tables).append(table.select(SCHEMA.names).cast(SCHEMA))
        except (pa.ArrowException, ValueError):
            skipped.setdefault("columns of other types", []).append(path.name)
    if skipped:
        parts = [
            f"{len(names)} {reason} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for reason, names in skipped.items()
        ]
        warnings.warn(f"skipped files in {folder}: " + "; ".join(parts), stacklevel=3)
    return tables, old_tables
