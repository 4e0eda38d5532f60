"""Running many cells: skip those already done, run the rest on joblib workers, show progress, summarize.

`run_cells` takes resolved cell configs (the grid sweeper in hydra_plugins/ composes them from the Hydra
grid) and is what `make sweep` ends in. `run_and_save` is the task each worker runs for one cell. This module
imports neither torch nor scikit-learn, and on loky workers the parent process never does: it composes, checks
the knobs and folders, and counts. The workers import what a cell needs while it composes (`warm_worker`), then
check the datasets of the cells to run (their loaders are scikit-learn's) before the first cell goes out. (With
one job, joblib runs everything in the parent; a Dask sweep checks the datasets there.)

The workers are joblib's: loky processes on this machine by default, or a Dask cluster (`backend="dask"`),
either one already running at `address` or a local one started for the sweep. Every worker writes its
records straight into the records folder, so on a cluster that folder must be one all machines share.
"""

import atexit
import gc
import multiprocessing
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from joblib import Parallel, delayed, effective_n_jobs, parallel_config
from omegaconf import DictConfig
from tqdm import tqdm

from harness.checks import ConfigError, dataset_problems, distinct_datasets
from harness.recipe import cell_id
from harness.records import (
    QUARANTINE,
    FolderScan,
    cell_lock,
    check_writable,
    lock_path,
    quarantine,
    record_status,
    remove_stale_locks,
    remove_stale_temporaries,
    scan_folder,
    write_record,
)


def run_and_save(cfg: DictConfig, recheck: bool = False) -> dict:
    """Run one cell under its lock, write its record at once, and return a short outcome.

    If another process holds the cell's lock (a second sweep into the same folder), the cell is not run: the
    outcome's status is "elsewhere". With `recheck`, a cell whose record says ok once the lock is taken is
    not run either ("done"): the other sweep finished it after this sweep's parent looked.
    """
    key = cell_id(cfg)
    with cell_lock(cfg.run.records, key) as held:
        if not held:
            reason = f"another process (a sweep into the same folder) holds its lock, {lock_path(cfg.run.records, key)}"
            return {"cell_id": key, "status": "elsewhere", "wall_s": 0.0, "error": reason}
        if recheck and is_done(cfg, key):
            return {"cell_id": key, "status": "done", "wall_s": 0.0, "error": None}
        warm_worker()  # once per worker process; Dask's workers have had no warm-up
        from harness.cell import run_cell  # here, in the worker: the sweep's own process never imports torch

        record = run_cell(cfg)
        write_record(record, cfg.run.records)
    return {name: record[name] for name in ("cell_id", "status", "wall_s", "error")}


@cache  # once per process
def warm_worker() -> None:
    """Import what a cell needs, in a worker before the first cell arrives.

    That is torch (about 1 s of CPU), torch._dynamo, which torch.optim imports at the first optimizer step
    (about 1.2 s), and scikit-learn with scipy.stats and pandas (about 1.2 s), which the datasets' loaders
    and the references need: every cell needs all of them.

    They leave about 400,000 objects that live as long as the process, and Python's garbage collector walks
    them again and again: six full collections while they are imported (0.9 s of the 4 s), one soon after, about
    one every ten cells (0.2 s each) and a last one when the worker exits, which the sweep waits for (1 to 2 s).
    So the collector is off while they are imported, and in a worker process (not the sweep's own: with one job,
    joblib runs the cells there) they are then frozen (`gc.freeze`: left out of every later collection), as is
    whatever else is left at exit, when every record is written. Nothing a cell measures depends on when its
    garbage is collected.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        import torch._dynamo  # noqa: F401

        import harness.cell  # noqa: F401
    finally:
        if multiprocessing.parent_process() is not None:
            gc.freeze()
            atexit.register(gc.freeze)
        if collecting:
            gc.enable()


def is_done(cfg: DictConfig, key: str) -> bool:
    """A cell (its id `key`) is done when its record exists and says ok; failed and skipped cells are tried again."""
    return not cfg.run.force and record_status(cfg.run.records, key) == "ok"


@contextmanager
def engine(backend: str, n_jobs: int, address: str | None = None) -> Iterator[Parallel]:
    """The joblib Parallel that runs the cells: loky (or any joblib backend) here, or a Dask cluster.

    With backend="dask", `address` names a running scheduler (e.g. tcp://10.0.0.5:8786); without one, a local
    cluster of `n_jobs` single-threaded worker processes runs for the duration of the sweep.
    """
    if backend != "dask":
        with Parallel(n_jobs=n_jobs, backend=backend, return_as="generator_unordered") as parallel:
            yield parallel
        return
    from dask.distributed import Client, LocalCluster

    cluster = None
    if address is None:
        workers = effective_n_jobs(n_jobs)
        # Its processes ignore Ctrl-C (they inherit that): Ctrl-C in a terminal reaches the whole process group,
        # and a Dask worker that gets it tears itself down under a running cell, printing tracebacks and
        # failing the cell. Here only this process takes it, and closing the cluster below stops them.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        finally:
            signal.signal(signal.SIGINT, previous)
    try:
        with Client(address or cluster), parallel_config(backend="dask"):
            # joblib 1.6 fails on Parallel(backend="dask") given as a name; inside parallel_config it works.
            # Each cell still sets its own torch threads (run.threads), as it does in a loky process.
            yield Parallel(n_jobs=-1, return_as="generator_unordered")
    finally:
        if cluster is not None:
            cluster.close()


@dataclass
class _Sweep:
    """What a sweep has done so far: kept up to date while it runs, so that Ctrl-C still finds it."""

    cells: Sequence[DictConfig] | None = None  # None until the grid is composed
    counts: Counter = field(default_factory=Counter)
    problems: list[dict] = field(default_factory=list)  # outcomes of the cells that failed or were skipped
    elsewhere: list[str] = field(default_factory=list)  # cells another sweep holds the lock of
    folders: list[str] = field(default_factory=list)
    scans: dict[str, FolderScan] = field(default_factory=dict)  # folder -> what it held when the sweep began
    written: dict[str, set[str]] = field(default_factory=dict)  # folder -> names of the records this sweep wrote
    moved: dict[str, dict[str, str]] = field(default_factory=dict)  # folder -> quarantined name -> why
    overwritten: dict[str, dict[str, str]] = field(default_factory=dict)  # folder -> bad file of a cell to run


def run_cells(
    cells: Sequence[DictConfig] | Callable[[], Sequence[DictConfig]],
    n_jobs: int = -1,
    backend: str = "loky",
    out=sys.stderr,
    address: str | None = None,
) -> Counter:
    """Run every cell not done yet on `n_jobs` joblib workers; print progress and a summary.

    `cells` may be a function that composes them: it is then called while the workers start up.
    Returns the count of outcomes by status: ok, failed, skipped (device missing), done (not rerun),
    duplicate (a cell whose recipe another job of this sweep already has) and elsewhere (another sweep holds
    the cell's lock); "interrupted" is 1 after Ctrl-C, which ends the sweep with its summary all the same.
    A records folder that cannot be written, or a dataset of a cell to run that cannot be split, raises
    ConfigError (one line each) before any cell runs.
    """
    started = time.perf_counter()
    sweep = _Sweep()
    try:
        with warnings.catch_warnings(), engine(backend, n_jobs, address) as parallel:
            # When every cell is done already, the workers' warm-up is dropped unfinished: joblib warns about it.
            warnings.filterwarnings("ignore", message=r".*tasks which were still being processed", category=UserWarning)
            # Loky's fresh processes import torch before the first cell arrives; Dask workers import on first use.
            warming = (
                parallel(delayed(warm_worker)() for _ in range(effective_n_jobs(n_jobs))) if backend != "dask" else None
            )
            try:
                _run(cells() if callable(cells) else cells, parallel, warming, out, sweep)
            finally:
                if warming is not None:
                    warming.close()  # unfinished (nothing to run, or an error): leaving it open waits for it
    except KeyboardInterrupt:
        # Leaving the `with` above has stopped the workers; the records they finished are on disk.
        sweep.counts["interrupted"] = 1
        _clear_after_interrupt(sweep.folders)
    _summarize(sweep, time.perf_counter() - started, out)
    return sweep.counts


def _run(cells: Sequence[DictConfig], parallel: Parallel, warming, out, sweep: _Sweep) -> None:
    sweep.cells = cells
    sweep.folders = folders = sorted({str(cfg.run.records) for cfg in cells})
    sweep.scans = scans = {folder: scan_folder(folder) for folder in folders}
    sweep.written = {folder: set() for folder in folders}
    counts = sweep.counts
    todo, seen, keys, folder_of = [], set(), {folder: set() for folder in folders}, {}
    for cfg in cells:
        key, folder = cell_id(cfg), str(cfg.run.records)
        if key in seen:
            counts["duplicate"] += 1
        elif f"{key}.parquet" not in scans[folder].foreign and is_done(cfg, key):
            counts["done"] += 1
        else:
            todo.append(cfg)
            keys[folder].add(key)
            folder_of[key] = folder
        seen.add(key)
    asked = {str(cfg.run.records) for cfg in cells if cfg.run.get("quarantine", False)}
    # Only a folder something is written into must be writable: a sweep over a finished, read-only archive
    # just reports it. Checked here, in the parent, before any worker gets a cell.
    writing = {str(cfg.run.records) for cfg in todo} | {f for f in asked if scans[f].foreign}
    for folder in sorted(writing):
        reason = check_writable(folder)
        if reason:
            raise ConfigError(f"records folder {folder} cannot be written: {reason}")
    # The datasets of the cells still to run, each loaded once and checked (one class, NaN features, too few to
    # split): here rather than while composing, so that a sweep with nothing left to run loads none of them.
    problems = _dataset_problems(todo, parallel, warming)
    if problems:
        raise ConfigError(*problems)
    for folder in folders:
        foreign = scans[folder].foreign
        moved = quarantine(folder, list(foreign)) if folder in asked and foreign else []
        sweep.moved[folder] = {name: foreign[name] for name in moved}
        # A bad file named after a cell of this grid is simply replaced when that cell runs.
        sweep.overwritten[folder] = {
            name: why for name, why in foreign.items() if name not in moved and name[: -len(".parquet")] in keys[folder]
        }
    _clear_temporaries(folders)

    if not todo:  # nothing to run: no need to wait for the workers' warm-up
        return
    # The warm-up is over: _dataset_problems waited for it (one Parallel call at a time) before checking there.
    with tqdm(total=len(todo), unit="cell", desc="cells", file=out, dynamic_ncols=True, mininterval=1) as bar:
        outcomes = parallel(delayed(run_and_save)(cfg, recheck=True) for cfg in todo)
        try:
            for outcome in outcomes:
                counts[outcome["status"]] += 1
                if outcome["status"] in ("ok", "failed", "skipped"):  # a record written: whole, by construction
                    sweep.written[folder_of[outcome["cell_id"]]].add(f"{outcome['cell_id']}.parquet")
                if outcome["status"] == "elsewhere":
                    sweep.elsewhere.append(outcome["cell_id"])
                elif outcome["status"] not in ("ok", "done"):
                    sweep.problems.append(outcome)
                    bar.set_postfix(failed=counts["failed"], skipped=counts["skipped"], refresh=False)
                bar.update()
        finally:
            outcomes.close()  # on Ctrl-C in this loop: joblib stops the workers when its generator is closed
    _clear_temporaries(folders)  # again at the end: a writer killed just before this sweep began is surely gone now


def _dataset_problems(todo: list[DictConfig], parallel: Parallel, warming) -> list[str]:
    """The problems of the datasets of the cells to run (`harness.checks.dataset_problems`), checked in a worker.

    The grid's datasets are scikit-learn's, and loading them imports it (with scipy.stats and pandas, about 1.5 s
    of CPU), as the workers do anyway: checked there, once their warm-up is over, the sweep's own process never
    imports it and leaves that CPU to the workers' imports. Without a warm-up (Dask's workers import on first
    use), or with nothing to run, here.
    """
    if warming is None or not todo:
        return dataset_problems(todo)
    list(warming)  # one Parallel call at a time: the warm-up has to be finished first
    cells = distinct_datasets(todo)  # one small plain dict per dataset and split, not every cell's config
    (problems,) = parallel([delayed(dataset_problems)(cells, keep=False)])  # unpacked: the call runs to its end
    return problems


def _summarize(sweep: _Sweep, wall: float, out) -> None:
    """The summary: one line of counts, the cells that did not run ok, and per folder how to read it."""
    counts, interrupted = sweep.counts, bool(sweep.counts["interrupted"])
    if sweep.cells is None:
        print("interrupted while composing the grid: no cell ran", file=out)
        return
    ran = counts["ok"] + counts["failed"]
    print(
        f"sweep{' (interrupted)' if interrupted else ''}: {len(sweep.cells)} cells in {wall:.1f} s: "
        f"ran {ran} (ok {counts['ok']}, failed {counts['failed']}), "
        f"already done {counts['done']}, skipped {counts['skipped']}"
        + (f", running elsewhere {counts['elsewhere']}" if counts["elsewhere"] else "")
        + (f", duplicates {counts['duplicate']}" if counts["duplicate"] else ""),
        file=out,
    )
    for outcome in sorted(sweep.problems, key=lambda o: o["cell_id"]):
        print(f"  {outcome['status']} {outcome['cell_id']}: {outcome['error']}", file=out)
    if sweep.elsewhere:  # a count and a few names: two sweeps of the zoo share hundreds of cells
        names, one = sorted(sweep.elsewhere), len(sweep.elsewhere) == 1
        print(
            f"  running elsewhere: {len(names)} cell{'' if one else 's'} ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}) {'is' if one else 'are'} being run by another sweep into the same "
            f"folder, which holds {'its lock' if one else 'their locks'}; run this command again once it is done to "
            "check them",
            file=out,
        )
    for folder in sweep.folders:
        _summarize_folder(folder, sweep, out)
    if interrupted:
        total, kept = set(), 0
        for cfg in sweep.cells:
            key = cell_id(cfg)
            if key not in total:
                total.add(key)
                kept += record_status(cfg.run.records, key) == "ok"
        again = (
            "run it again without run.force=true to resume"
            if any(cfg.run.force for cfg in sweep.cells)
            else "run the same command again to resume"
        )
        print(f"interrupted: {kept} of {len(total)} cells finished and are kept; {again}", file=out)


def _summarize_folder(folder: str, sweep: _Sweep, out) -> None:
    """How to read a records folder, and what in it is not a record: named, moved aside, or replaced."""
    moved, overwritten = sweep.moved.get(folder, {}), sweep.overwritten.get(folder, {})
    # Scanned again, as it is now (the sweep replaced some bad files), reading only what it has not seen whole.
    first = sweep.scans.get(folder)
    scan = scan_folder(folder, trusted={*(first.records if first else ()), *sweep.written.get(folder, ())})
    rewritten = {name: why for name, why in overwritten.items() if name not in scan.foreign}
    if not scan.foreign and not scan.older:
        print(f"records: {folder}  (pandas.read_parquet({folder!r}))", file=out)
    else:
        # pandas reads every file there and fails on (or mixes in) what is not a record of this schema;
        # the project's loader skips those with a warning. Printed as text: harness never imports analysis.
        print(
            f"records: {folder}  (analysis.load.load_records({folder!r}); pandas.read_parquet would fail on or "
            "mix in the files named below)",
            file=out,
        )
    if moved:
        print(f"  moved to {Path(folder) / QUARANTINE}: {_names(moved)}", file=out)
    if rewritten:
        print(f"  rewritten (cells of this grid, run again): {_names(rewritten)}", file=out)
    if scan.foreign:
        print(
            f"  not records: {_names(scan.foreign)}; run.quarantine=true moves them to {Path(folder) / QUARANTINE}",
            file=out,
        )
    if scan.older:
        print(
            f"  other schema: {_names(scan.older)}; a sweep of their grid measures them again, and "
            "load_records leaves them out beside records of this version",
            file=out,
        )


def _names(files: dict[str, str] | list[str], shown: int = 3) -> str:
    """`N files: a (why), b (why), ...`: the count and the first few names, with why when known."""
    whys = files if isinstance(files, dict) else dict.fromkeys(files)
    listed = ", ".join(name + (f" ({why})" if why else "") for name, why in list(whys.items())[:shown])
    return f"{len(whys)} file{'s' if len(whys) != 1 else ''}: {listed}{', ...' if len(whys) > shown else ''}"


def _clear_after_interrupt(folders: list[str], wait_s: float = 2.0) -> None:
    """After Ctrl-C: delete what the stopped workers left, waiting up to `wait_s` for the killed ones to be gone.

    A worker killed in the middle of writing a record never runs its cleanup, so its temporary file stays (readers
    skip it, and the next sweep would delete it); it is removed once its process no longer exists.
    """
    deadline = time.monotonic() + wait_s
    while True:
        _clear_temporaries(folders)
        left = [p for folder in folders if Path(folder).is_dir() for p in Path(folder).glob(".*.parquet.*.tmp")]
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _clear_temporaries(folders: list[str]) -> None:
    """Delete what killed writers left in the records folders: temporary files and the lock files of cells."""
    for folder in folders:
        if Path(folder).is_dir():
            # A folder this sweep cannot write (it has nothing to run there) keeps them: readers skip them anyway.
            with suppress(OSError):
                remove_stale_temporaries(folder)
                remove_stale_locks(folder)
