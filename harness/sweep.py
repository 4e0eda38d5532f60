"""Running many cells: skip those already done, run the rest on joblib workers, show progress, summarize.

`run_cells` takes resolved cell configs (the grid sweeper in hydra_plugins/ composes them from the Hydra
grid) and is what `make sweep` ends in. `run_and_save` is the task each worker runs for one cell. This module
imports no torch: the parent process only composes, checks and counts, and `harness.cell` is imported in
the workers when the first cell runs there.

The workers are joblib's: loky processes on this machine by default, or a Dask cluster (`backend="dask"`),
either one already running at `address` or a local one started for the sweep. Every worker writes its
records straight into the records folder, so on a cluster that folder must be one all machines share.
"""

import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from joblib import Parallel, delayed, effective_n_jobs, parallel_config
from omegaconf import DictConfig
from tqdm import tqdm

from harness.records import cell_id, record_status, remove_stale_temporaries, write_record


def run_and_save(cfg: DictConfig) -> dict:
    """Run one cell, write its record at once, and return a short outcome."""
    from harness.cell import run_cell  # in the worker: the parent never pays for importing torch

    record = run_cell(cfg)
    write_record(record, cfg.run.records)
    return {name: record[name] for name in ("cell_id", "status", "wall_s", "error")}


def warm_worker() -> None:
    """Import what a cell needs before the first cell arrives.

    That is torch and scikit-learn (about 2.5 s), and torch._dynamo, which torch.optim imports on first use
    (another 1.4 s).
    """
    import torch._dynamo  # noqa: F401

    import harness.cell  # noqa: F401


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
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        with Client(address or cluster), parallel_config(backend="dask"):
            # joblib 1.6 fails on Parallel(backend="dask") given as a name; inside parallel_config it works.
            # Each cell still sets its own torch threads (run.threads), as it does in a loky process.
            yield Parallel(n_jobs=-1, return_as="generator_unordered")
    finally:
        if cluster is not None:
            cluster.close()


def run_cells(
    cells: Sequence[DictConfig] | Callable[[], Sequence[DictConfig]],
    n_jobs: int = -1,
    backend: str = "loky",
    out=sys.stderr,
    address: str | None = None,
) -> Counter:
    """Run every cell not done yet on `n_jobs` joblib workers; print progress and a summary.

    `cells` may be a function that composes them: it is then called while the workers start up.
    Returns the count of outcomes by status: ok, failed, skipped (device missing), done (not rerun) and
    duplicate (a cell whose recipe another job of this sweep already has).
    """
    started = time.perf_counter()
    with warnings.catch_warnings(), engine(backend, n_jobs, address) as parallel:
        # When every cell is done already, the workers' warm-up is dropped unfinished: joblib warns about it.
        warnings.filterwarnings("ignore", message=r".*tasks which were still being processed", category=UserWarning)
        # Loky's fresh processes import torch before the first cell arrives; Dask workers import on first use.
        warming = (
            parallel(delayed(warm_worker)() for _ in range(effective_n_jobs(n_jobs))) if backend != "dask" else None
        )
        cells = cells() if callable(cells) else cells
        counts, problems, folders = _run(cells, parallel, warming, out)
    wall = time.perf_counter() - started
    ran = counts["ok"] + counts["failed"]
    print(
        f"sweep: {len(cells)} cells in {wall:.1f} s: ran {ran} (ok {counts['ok']}, failed {counts['failed']}), "
        f"already done {counts['done']}, skipped {counts['skipped']}"
        + (f", duplicates {counts['duplicate']}" if counts["duplicate"] else ""),
        file=out,
    )
    for outcome in sorted(problems, key=lambda o: o["cell_id"]):
        print(f"  {outcome['status']} {outcome['cell_id']}: {outcome['error']}", file=out)
    for folder in folders:
        print(f"records: {folder}  (pandas.read_parquet({folder!r}))", file=out)
    return counts


def _run(cells: Sequence[DictConfig], parallel: Parallel, warming, out) -> tuple[Counter, list[dict], list[str]]:
    counts: Counter = Counter()
    todo, seen = [], set()
    for cfg in cells:
        key = cell_id(cfg)
        if key in seen:
            counts["duplicate"] += 1
        elif is_done(cfg, key):
            counts["done"] += 1
        else:
            todo.append(cfg)
        seen.add(key)
    folders = sorted({str(cfg.run.records) for cfg in cells})
    _clear_temporaries(folders)

    problems = []
    if not todo:  # nothing to run: no need to wait for the workers' warm-up
        if warming is not None:
            warming.close()
        return counts, problems, folders
    if warming is not None:
        list(warming)  # one Parallel call at a time: the warm-up has to be finished before the cells go out
    with tqdm(total=len(todo), unit="cell", desc="cells", file=out, dynamic_ncols=True, mininterval=1) as bar:
        if todo:
            for outcome in parallel(delayed(run_and_save)(cfg) for cfg in todo):
                counts[outcome["status"]] += 1
                if outcome["status"] != "ok":
                    problems.append(outcome)
                    bar.set_postfix(failed=counts["failed"], skipped=counts["skipped"], refresh=False)
                bar.update()
    _clear_temporaries(folders)  # again at the end: a writer killed just before this sweep began is surely gone now
    return counts, problems, folders


def _clear_temporaries(folders: list[str]) -> None:
    """Delete what killed writers left in the records folders."""
    for folder in folders:
        if Path(folder).is_dir():
            remove_stale_temporaries(folder)
