"""Records: one parquet file per cell, in one flat folder, all written with one explicit schema.

The columns are declared by the modules that produce them and assembled in harness/columns.py (name, kind, meaning,
whether each step budget keeps it); this module turns that table into the schema.

`pandas.read_parquet(folder)` loads a whole grid in one call. Files are written under a temporary name that
starts with "." (which parquet readers skip) and renamed into place, so a reader never meets a partial file.
The schema's identity, SCHEMA_ID, is a fingerprint of the declared columns (names, kinds, meanings, whether each
step budget keeps them): declaring a column, or changing one's kind or meaning, makes a new schema by itself, and
every check of "written with this schema" (the sweep's "already done", the folder scan, `load_records`) reads the
same thing, the id in the file's footer (`written_with_this_schema`). There is no number to raise by hand.

A folder is also where sweeps meet: `scan_folder` names what else lies there (foreign, truncated or misnamed
files, which make `pandas.read_parquet(folder)` fail or read wrong rows), `quarantine` moves those aside,
`check_writable` tries a folder before any cell runs, and `cell_lock` keeps two sweeps from running one cell.
"""

import errno
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.column import BOOL, F64, I32, I64, STR, TIMESTAMP
from harness.columns import CHECKPOINT_COLUMNS, COLUMNS, DECLARED, Column

_ARROW = {F64: pa.float64(), I64: pa.int64(), I32: pa.int32(), STR: pa.string(), BOOL: pa.bool_()}
_ARROW[TIMESTAMP] = pa.timestamp("us", tz="UTC")


def arrow_type(kind: str) -> pa.DataType:
    """The pyarrow type of a column kind (harness/column.py: a name, or `list<name>`)."""
    if kind.startswith("list<") and kind.endswith(">"):
        return pa.list_(_ARROW[kind[len("list<") : -1]])
    return _ARROW[kind]


_TYPES = {name: arrow_type(kind) for name, kind, _ in COLUMNS}
_FIELDS = [(name, _TYPES[name], doc) for name, _, doc in COLUMNS]
_FIELDS.append(
    (
        "checkpoints",
        pa.list_(pa.struct([(name, _TYPES[name]) for name in CHECKPOINT_COLUMNS])),
        "per step budget reached: the measurements of CHECKPOINT_COLUMNS at that step",
    )
)


def schema_id(columns: Iterable[Column]) -> str:
    """A fingerprint of declared columns: what they are named, hold and mean, and whether step budgets keep them.

    The order of the declarations is left out: moving a declaration to another module changes no measurement.
    """
    declared = sorted((column.name, column.kind, column.meaning, column.per_budget) for column in columns)
    return hashlib.sha1(json.dumps(declared).encode()).hexdigest()[:12]


SCHEMA_ID = schema_id(DECLARED)
SCHEMA_ID_KEY = b"schema_id"  # the footer's key-value entry that holds the id a record was written with
OLD_VERSION_KEY = b"schema_version"  # where records written before there were ids kept their version number
SCHEMA = pa.schema(
    [pa.field(name, kind, metadata={"doc": doc}) for name, kind, doc in _FIELDS],
    metadata={SCHEMA_ID_KEY: SCHEMA_ID},
)


def stored_schema_id(footer: dict[bytes, bytes] | None) -> str | None:
    """The schema id a record file was written with, from its footer's key-value metadata (`schema.metadata`).

    A record written before there were ids gives its version number, which no id equals.
    """
    footer = footer or {}
    stored = footer.get(SCHEMA_ID_KEY) or footer.get(OLD_VERSION_KEY)
    return stored.decode() if stored else None


def written_with_this_schema(footer: dict[bytes, bytes] | None) -> bool:
    """Whether a record file (its footer's key-value metadata) was written with the current schema.

    The one test the sweep's "already done", the folder scan and `load_records` all apply.
    """
    return stored_schema_id(footer) == SCHEMA_ID


def empty_record() -> dict:
    """A record with every column present and null."""
    return dict.fromkeys(SCHEMA.names)


def record_path(folder: str | os.PathLike, cell_id: str) -> Path:
    return Path(folder) / f"{cell_id}.parquet"


def write_record(record: dict, folder: str | os.PathLike) -> Path:
    """Write one record atomically; returns its path. Unknown or missing columns are an error."""
    if set(record) != set(SCHEMA.names):
        extra, missing = set(record) - set(SCHEMA.names), set(SCHEMA.names) - set(record)
        raise KeyError(f"record does not match the schema: extra {sorted(extra)}, missing {sorted(missing)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = record_path(folder, record["cell_id"])
    temporary = folder / f".{final.name}.{os.getpid()}.tmp"  # leading "." : readers skip it
    # The footer holds the id the record says it was written with (the current one, but for a test's older record).
    schema = SCHEMA.with_metadata({SCHEMA_ID_KEY: str(record["schema_id"] or SCHEMA_ID)})
    table = pa.Table.from_pylist([record], schema=schema)
    try:
        with open(temporary, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, final)  # atomic on POSIX: the old file or the new one, never half of one
    finally:
        temporary.unlink(missing_ok=True)
    return final


def remove_stale_temporaries(folder: str | os.PathLike) -> int:
    """Delete temporary files left by writers that no longer run (a killed sweep); returns how many."""
    removed = 0
    for path in Path(folder).glob(".*.tmp"):
        match = re.fullmatch(r"\..+\.parquet\.(\d+)\.tmp", path.name)
        if match is None:
            continue
        try:
            pid = int(match.group(1))
            os.kill(pid, 0)  # signal 0 only asks whether the process exists
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            removed += 1
        except PermissionError:
            pass  # another user's live process
    return removed


def record_status(folder: str | os.PathLike, cell_id: str) -> str | None:
    """Status of the stored record of a cell: ok, failed or skipped.

    None if there is none, it cannot be read, it holds another cell's record (a copy under this name), or it was
    written with another schema (a measurement may mean something else now, or be missing: a sweep measures it again).
    """
    path = record_path(folder, cell_id)
    if not path.exists():
        return None
    try:
        table = pq.read_table(path, columns=["status", "cell_id"])
        stored = table.to_pylist()[0]
    except (OSError, pa.ArrowException, KeyError, IndexError):
        return None
    if stored["cell_id"] != cell_id:  # another cell's record under this name (a copy): this cell has none
        return None
    return stored["status"] if written_with_this_schema(table.schema.metadata) else None


RECORD_COLUMNS = ("cell_id", "status")  # with a schema id or version in the footer: a record of this project
QUARANTINE = ".quarantine"  # a dot folder inside the records folder: parquet readers skip it


@dataclass
class FolderScan:
    """What a records folder holds besides whole records of the current schema, by file name."""

    records: list[str] = field(default_factory=list)  # readable one-row records named after their cell id
    foreign: dict[str, str] = field(default_factory=dict)  # name -> why it is not such a record
    older: list[str] = field(default_factory=list)  # records of another schema: load_records reads them, pandas
    # may not (it takes the columns of whichever file it reads first)


def scan_folder(folder: str | os.PathLike, trusted: Collection[str] = ()) -> FolderScan:
    """Look at every entry of a records folder that parquet readers read, from the files' footers only.

    `pandas.read_parquet(folder)` reads every entry whose name does not start with "." or "_", whatever its
    suffix, and descends into folders; so a notes file, a truncated record or another table there makes it
    fail or read wrong rows. A footer costs well under a millisecond to read, a thousand records a fraction
    of a second; names in `trusted` (records just written, or found whole by an earlier scan) are not read.
    """
    scan = FolderScan()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return scan
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue  # temporaries, locks, .hydra and .quarantine: every parquet reader skips these
        if entry.name in trusted:
            problem = None
        elif entry.is_dir():
            problem = "a folder (parquet readers read it too)"
        else:
            problem = _record_problem(Path(entry.path))
        if problem == "other schema":
            scan.older.append(entry.name)
        elif problem:
            scan.foreign[entry.name] = problem
        else:
            scan.records.append(entry.name)
    return scan


def _record_problem(path: Path) -> str | None:
    """Why the file is not a readable record of the current schema named after its cell id; None if it is one."""
    if path.suffix != ".parquet":
        return "not a parquet file"
    try:
        metadata = pq.read_metadata(path)
        current = written_with_this_schema(metadata.metadata)  # the id alone decides, as everywhere
        names = SCHEMA.names if current else metadata.schema.to_arrow_schema().names
    except (OSError, pa.ArrowException):
        return "unreadable"  # truncated, empty, or not parquet at all
    if not set(RECORD_COLUMNS) <= set(names) or stored_schema_id(metadata.metadata) is None:
        return "not a record"
    if metadata.num_rows != 1:
        return f"{metadata.num_rows} rows, where a record has one"
    stored = _stored_cell_id(path, metadata)
    if stored is None:
        return "unreadable"
    if stored != path.stem:
        return f"holds the record of {stored}"  # a copy: read with the others, that cell would appear twice
    return None if current else "other schema"


def _stored_cell_id(path: Path, metadata: pq.FileMetaData) -> str | None:
    """The cell id a one-row file holds: from the footer's column statistics, else from the column itself."""
    group = metadata.row_group(0) if metadata.num_row_groups else None
    for i in range(group.num_columns if group else 0):
        column = group.column(i)
        if column.path_in_schema == "cell_id" and column.is_stats_set and column.statistics.has_min_max:
            value = column.statistics.min
            return value.decode() if isinstance(value, bytes) else value
    try:
        return pq.read_table(path, columns=["cell_id"]).column(0)[0].as_py()
    except (OSError, pa.ArrowException, IndexError):
        return None


def quarantine(folder: str | os.PathLike, names: list[str]) -> list[str]:
    """Move these entries of a records folder into its `.quarantine/` folder; returns the names moved.

    Nothing is deleted: a name already in the quarantine gets a numbered suffix.
    """
    target = Path(folder) / QUARANTINE
    target.mkdir(exist_ok=True)
    moved = []
    for name in names:
        destination, n = target / name, 0
        while destination.exists():
            n += 1
            destination = target / f"{name}.{n}"
        try:
            os.replace(Path(folder) / name, destination)  # the same file system: a rename, never a copy
        except FileNotFoundError:
            continue  # gone meanwhile (another sweep moved or rewrote it)
        moved.append(name)
    return moved


def check_writable(folder: str | os.PathLike) -> str | None:
    """Why records cannot be written into `folder`, or None when they can.

    It creates the folder if needed and then a file in it, and deletes that: permission bits say nothing to
    root, nor about a read-only mount or a full disk. The file is named like a writer's temporary, so that
    `remove_stale_temporaries` deletes it should this process be killed in between.
    """
    folder = Path(folder)
    probe = folder / f".write-check.parquet.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as sink:
            sink.write(b"PAR1")
        probe.unlink()
    except OSError as error:
        blocker = next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
        if isinstance(error, NotADirectoryError | FileExistsError) and (blocker or folder.exists()):
            return f"{blocker or folder} is a file, not a folder"  # what "Not a directory" means here
        where = f" ({error.filename})" if error.filename and Path(error.filename) != folder else ""
        return f"{error.strerror or error}{where}"
    return None


def remove_stale_locks(folder: str | os.PathLike) -> int:
    """Delete the lock files no process holds (left by a killed worker); returns how many.

    Each one is taken first, as `cell_lock` takes it, and removed while held: a lock another sweep holds is
    never touched, and a process about to take one that is removed sees it gone and makes a new one. (A
    worker of another sweep trying that very lock in the same instant is told it is held, and reports its
    cell as running elsewhere: rare, and said in its summary; its next run does the cell.)
    """
    removed = 0
    for path in Path(folder).glob(".*.lock"):
        try:
            descriptor = os.open(path, os.O_RDWR)
        except OSError:
            continue  # gone meanwhile
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:
            pass  # held: a cell is running
        finally:
            os.close(descriptor)
    return removed


def lock_path(folder: str | os.PathLike, cell_id: str) -> Path:
    return Path(folder) / f".{cell_id}.lock"  # leading "." : readers skip it


@contextmanager
def cell_lock(folder: str | os.PathLike, cell_id: str) -> Iterator[bool]:
    """Hold the lock of one cell while the body runs; yields False, at once, if another process holds it.

    An exclusive flock on `.<cell_id>.lock` in the records folder: the kernel lets go of it when its holder
    dies, however it dies, so a killed sweep never leaves a cell locked. flock works across the machines of
    a Dask cluster on a shared NFS folder too (Linux maps it to NFS byte-range locks). The lock file is
    removed by its holder, while still holding it, so that a folder is not left with a lock file per cell.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = lock_path(folder, cell_id)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.EWOULDBLOCK, errno.EACCES):
                yield False
                return
            # A file system without locks: run unlocked, as every sweep did before there were locks.
            yield True
            return
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        opened = os.fstat(descriptor)
        if current is not None and (current.st_ino, current.st_dev) == (opened.st_ino, opened.st_dev):
            break
        # We locked a file its holder had just removed: that lock guards nothing. Take the one there now.
        os.close(descriptor)
    try:
        yield True
    finally:
        path.unlink(missing_ok=True)  # before letting go: a process waiting on this file sees it gone, retries
        os.close(descriptor)
