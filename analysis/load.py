"""Loading records: one call from a records folder to a pandas DataFrame with the harness's schema."""

import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import SCHEMA


class NoRecords(FileNotFoundError):
    """The folder holds no readable record."""


def load_records(folder: str | Path) -> pd.DataFrame:
    """Every record in `folder` as one DataFrame (one row per cell, the columns of harness.records.SCHEMA).

    Files that cannot be read, or that are not records of this schema, are skipped with a warning naming
    them; temporary files (names starting with "." or "_") are ignored. Duplicate cell ids are refused.
    """
    folder = Path(folder)
    paths = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_"))) if folder.is_dir() else []
    tables, skipped = [], []
    for path in paths:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as error:
            skipped.append(f"{path.name} (unreadable: {error})")
            continue
        missing = [name for name in SCHEMA.names if name not in table.column_names]
        if missing:
            skipped.append(
                f"{path.name} (not a record: lacks {', '.join(missing[:3])}{'...' if len(missing) > 3 else ''})"
            )
            continue
        try:
            tables.append(table.select(SCHEMA.names).cast(SCHEMA))
        except (pa.ArrowException, ValueError) as error:
            skipped.append(f"{path.name} (columns of other types: {error})")
    if skipped:
        warnings.warn(f"skipped {len(skipped)} file(s) in {folder}: " + "; ".join(skipped), stacklevel=2)
    if not tables:
        raise NoRecords(f"no records in {folder}: `make sweep RUNS={folder}` produces them")
    frame = pa.concat_tables(tables).to_pandas()
    duplicated = frame.cell_id[frame.cell_id.duplicated()].unique()
    if len(duplicated):
        raise ValueError(f"duplicate cell ids in {folder}: {', '.join(map(str, duplicated[:5]))}")
    return frame
