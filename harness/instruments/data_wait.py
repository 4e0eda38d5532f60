"""Data wait: how long the loop waited for its batches, against how long it ran.

A loop whose loader cannot keep up spends most of its time waiting for the next batch: a bigger model or a faster
device would not make it faster, a faster loader would. The wait is timed around each `next()` of the batch
iterator (`timed`), or handed over by a loop the instruments do not iterate (`add`, from `see`).

On a busy host the operating system takes the CPU away from the loop, from its loader's worker processes and from
torch's intra-op threads, for milliseconds at a time (8 to 30 ms seen on the 2-core machine under a load of 5 to
8). Timed by the wall clock, that moved the verdict with whatever else ran on the machine: a healthy in-memory
loader read as starved, and a loader that sleeps on its files as healthy, or as waiting longer than the whole
loop lasted (no compute left to compare with: not measured). With `exclude_host_pauses` (the doctor's) both sides
of the ratio are measured as they would be on a host of the loop's own:

- each `next()` waited its wall time less the time the loop's thread spent ready to run but waiting for a CPU
  during it (Linux's run-queue delay, `/proc/<task>/schedstat`), and less the most run-queue time any of the
  loader's worker processes spent during it (the worker whose batch it was queued no longer than that): what is
  left is the loader's own cost to the loop, its computing and its sleeps and reads (`HostQueues`);
- the loop's own compute is the number of batches times a low quantile (the 10th percentile) of the time from the
  end of one `next()` to the start of the next, less the loop's thread's run-queue time in it (`StepTimes`).

Why a quantile for the compute, and not its run-queue time alone: torch's intra-op threads spin at each
operation's barrier, so on a busy host a step waits at every barrier for whichever thread is off its CPU, and the
loop's thread spends that time running (spinning), counted by its CPU clock as well as by the wall clock. Seen on
the 2-core machine beside a CPU-burning process per core: the CNN of examples/ took a median of 117 ms of its
thread's own (non-queued) time per step against 10 ms with nothing beside it, and a 10th percentile of 4.9 ms
against 3.7 ms. The other threads' run-queue times do not help: a spinning thread is queued whether or not the
loop waits for it. The fastest steps are those the host left alone, as `timeit` takes the fastest of its repeats.
Its price: the loop's compute is that of a typical quick step, so a loop whose steps differ by design (gradient
accumulation, a costly step every few) reads as computing less than it does, and a bit more starved.

Why not the loader's CPU time: a loader that reads files, or decodes with a library that releases the GIL, costs
the loop wall time spent asleep, which no CPU clock counts. Why not a probe of the loop fed from memory: the doctor
does not own a user's training step, so it cannot re-run it on cached batches.

What the run queue does not show still moves the ratio a little: a CPU shared with a busy hyperthread computes
slower; workers more than the CPUs queue behind each other and count as if each had a CPU of its own; a
pin-memory thread's waits for a CPU count as the loader's. The grid's cells time as before (wall clock, loop less
waits), so that their records do not change; without those counters (not Linux), and for a loop that hands its
waits over (`add`), the doctor times so too. The reads cost about 3 µs per batch, and as much again per worker.
"""

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from harness.column import F64, Column
from harness.instruments.loop import Collector

SCHEDSTAT = "/proc/thread-self/schedstat"  # the calling thread's: CPU time, run-queue delay (ns), time slices
CHILDREN = "/proc/thread-self/children"  # the processes the calling thread started (a DataLoader's workers)
# A wait shorter than this is taken as timed (one read of the run queues fewer): the OS's pauses come in slices of
# milliseconds, and a shorter one moves no ratio.
PAUSE_FLOOR_S = 5e-4


class RunQueue:
    """The seconds one task (a thread, or a process's main thread) has spent ready to run but waiting for a CPU.

    Read from its schedstat file, kept open; `None` from the constructors where the file cannot be read (not Linux,
    or the process has ended).
    """

    def __init__(self, fd: int, thread: int | None = None):
        self.fd = fd
        self.thread = thread  # the thread whose file it is, where it is the calling thread's

    @classmethod
    def of_this_thread(cls) -> "RunQueue | None":
        return cls._opened(SCHEDSTAT, threading.get_ident())

    @classmethod
    def of_process(cls, pid: int) -> "RunQueue | None":
        """The main thread of process `pid` (a DataLoader's worker fetches its batches there)."""
        return cls._opened(f"/proc/{pid}/schedstat", None)

    @classmethod
    def _opened(cls, path: str, thread: int | None) -> "RunQueue | None":
        try:
            queue = cls(os.open(path, os.O_RDONLY), thread)
        except OSError:
            return None
        try:
            queue.seconds()
        except (OSError, ValueError, IndexError):
            queue.close()
            return None
        return queue

    def seconds(self) -> float:
        return int(os.pread(self.fd, 128, 0).split()[1]) * 1e-9

    def close(self) -> None:
        os.close(self.fd)


def children() -> set[int]:
    """The processes the calling thread started and that still run (empty where Linux does not list them)."""
    try:
        with open(CHILDREN) as listing:
            return {int(pid) for pid in listing.read().split()}
    except (OSError, ValueError):
        return set()


class HostQueues:
    """The run-queue seconds of the loop's thread and of its loader's worker processes: the host's part of a wait.

    The workers are the processes the loop's thread started while it waited for the first batch of a pass (a
    DataLoader starts them in `iter()`), found from `/proc/thread-self/children`; a worker that has ended is
    dropped. Workers started elsewhere (a forkserver's) are not found: their waits for a CPU stay in the waits.
    """

    def __init__(
        self,
        loop: RunQueue,
        started: Callable[[], set[int]] = children,
        worker_queue: Callable[[int], RunQueue | None] = RunQueue.of_process,
    ):
        self.loop = loop
        self.thread = loop.thread  # only the loop's own thread may read its file
        self.workers: dict[int, RunQueue] = {}
        self._started, self._worker_queue = started, worker_queue  # the listing and the files (tests script them)
        self._before: set[int] = set()

    @classmethod
    def of_this_thread(cls) -> "HostQueues | None":
        loop = RunQueue.of_this_thread()
        return None if loop is None else cls(loop)

    def pass_begins(self) -> None:
        """A pass over the batches is about to start its loader: the processes already running are not its own."""
        self._before = self._started()

    def first_batch_came(self) -> None:
        """The pass's first batch came: the processes started since are its loader's workers."""
        for pid in self._started() - self._before - set(self.workers):
            queue = self._worker_queue(pid)
            if queue is not None:
                self.workers[pid] = queue

    def read(self) -> tuple[float, dict[int, float]]:
        """The loop's thread's run-queue seconds, and each live worker's."""
        workers = {}
        for pid, queue in list(self.workers.items()):
            try:
                workers[pid] = queue.seconds()
            except (OSError, ValueError, IndexError):  # the worker has ended (a pass over, not persistent)
                queue.close()
                del self.workers[pid]
        return self.loop.seconds(), workers

    @staticmethod
    def taken_out(before: tuple[float, dict[int, float]], after: tuple[float, dict[int, float]]) -> float:
        """The host's seconds between two reads: the loop's thread's queueing, and the most any one worker queued."""
        workers = [after[1][pid] - queued for pid, queued in before[1].items() if pid in after[1]]
        return (after[0] - before[0]) + max(workers, default=0.0)

    def close(self) -> None:
        for queue in (self.loop, *self.workers.values()):
            queue.close()
        self.workers.clear()


class StepTimes:
    """The loop's own seconds per batch, kept as a histogram of 2% bins (constant memory), and a low quantile of it.

    `quantile` (0 < q < 1) is validated here: the loop's compute is `count * at_quantile()`.
    """

    GROWTH = 1.02  # each bin 2% wider than the one before: the quantile is read to within 2%
    SMALLEST_S = 1e-7  # the first bin's start: a tenth of a microsecond, under any step

    def __init__(self, quantile: float = 0.1):
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"a step time quantile is between 0 and 1, not {quantile}")
        self.quantile = quantile
        self.bins: dict[int, int] = {}
        self.count = 0

    def add(self, seconds: float) -> None:
        index = math.floor(math.log(max(seconds, self.SMALLEST_S) / self.SMALLEST_S, self.GROWTH))
        self.bins[index] = self.bins.get(index, 0) + 1
        self.count += 1

    def at_quantile(self) -> float:
        """The seconds at the quantile (the middle of its bin); NaN before any step."""
        if not self.count:
            return math.nan
        rank = self.quantile * (self.count - 1)
        seen = 0
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen > rank:
                return self.SMALLEST_S * self.GROWTH ** (index + 0.5)
        raise AssertionError("unreachable: the counts sum to count")


class DataWait(Collector):
    """Seconds spent waiting for batches, and the loop's own seconds since it asked for the first one.

    `exclude_host_pauses`: measure both as on a host of the loop's own (see the module docstring). `clock` and
    `host_queues` are the wall clock and the maker of the run-queue reader, given by tests to script a busy host.
    """

    COLUMNS = (
        Column("data_wait_s", F64, "seconds the loop waited for batches", per_budget=True),
        Column("loop_s", F64, "seconds of the training loop", per_budget=True),
        Column("data_wait_share", F64, "data_wait_s / loop_s", per_budget=True),
        Column("loader_workers", F64, "the DataLoader's num_workers (NaN: not a DataLoader, or not told)"),
    )

    def __init__(
        self,
        exclude_host_pauses: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        host_queues: Callable[[], HostQueues | None] = HostQueues.of_this_thread,
    ):
        self.wait_s = 0.0
        self.loop_start: float | None = None
        self.exclude_host_pauses = exclude_host_pauses
        self.loader_workers = math.nan
        self._clock = clock
        self._host_queues = host_queues
        self._host: HostQueues | None = None  # the loop's run queues, once timed() runs (and can read them)
        self.steps = StepTimes()  # the loop's own time from one batch to the next (with the run queues only)
        self._batches = 0  # batches yielded while the run queues were read: each had a step
        self._step_began: tuple[float, float] | None = None  # when the last batch came, and the loop's queue then

    def loader(self, batches: Iterable) -> None:
        """Read the loader's settings (its workers) where `batches` is a DataLoader, or anything that says so."""
        workers = getattr(batches, "num_workers", None)
        if isinstance(workers, int) and not isinstance(workers, bool):
            self.loader_workers = float(workers)

    def timed(self, batches: Iterable) -> Iterator[tuple[object, float]]:
        """Yield (batch, seconds waited for it) for each batch of `batches`."""
        self.loader(batches)
        if self.exclude_host_pauses and self._host is None and self.loop_start is None:
            self._host = self._host_queues()
        host = self._host if self._host is not None and self._host.thread == threading.get_ident() else None
        if host is not None:
            host.pass_begins()
        iterator = iter(batches)  # a DataLoader starts its workers here
        first = True
        while True:
            start = self._clock()
            before = host.read() if host is not None else None
            if self.loop_start is None:
                self.loop_start = start
            if before is not None and self._step_began is not None:
                self.steps.add(self._own(start, before[0]))  # the step on the last batch
                self._step_began = None
            try:
                batch = next(iterator)
            except StopIteration:
                return
            waited = self._clock() - start
            if host is not None:
                if waited >= PAUSE_FLOOR_S:
                    after = host.read()
                    waited = max(0.0, waited - host.taken_out(before, after))
                else:
                    after = before  # a short wait: its queueing (if any) counts in the step
                self._step_began = (start + waited if after is before else self._clock(), after[0])
                self._batches += 1
                if first:
                    host.first_batch_came()
            first = False
            yield batch, waited

    def _own(self, now: float, queued: float) -> float:
        """The loop's own seconds from the last batch's arrival to `now`: the wall time less its run-queue time."""
        began, queued_then = self._step_began
        return max(0.0, (now - began) - (queued - queued_then))

    def add(self, waited_s: float) -> None:
        """The loop waited `waited_s` seconds for its next batch; the first one also starts the loop's clock."""
        if self.loop_start is None:
            self.loop_start = self._clock() - waited_s
        self.wait_s += waited_s

    def columns(self, final: bool) -> dict:
        elapsed = self.wait_s + self._compute_s() if self.loop_start is not None else math.nan
        measured = {
            "data_wait_s": self.wait_s,
            "loop_s": elapsed,
            "data_wait_share": self.wait_s / elapsed if elapsed > 0 else math.nan,
        }
        return measured | {"loader_workers": self.loader_workers} if final else measured

    def _compute_s(self) -> float:
        """The loop's own compute: batches times a quick step where the run queues were read, else the wall clock."""
        if not self._batches:
            return self._clock() - self.loop_start - self.wait_s
        step = self.steps.at_quantile()
        if math.isnan(step) and self._step_began is not None and self._host is not None:
            try:  # one batch so far: its step, as it stands
                step = self._own(self._clock(), self._host.loop.seconds())
            except OSError:
                step = math.nan
        if math.isnan(step):  # the loop's thread has ended before a second batch: the wall clock
            return self._clock() - self.loop_start - self.wait_s
        return self._batches * step

    def close(self) -> None:
        """The last step as it stands at the end (columns() follows), and the files closed."""
        if self._host is not None:
            if self._step_began is not None and not self.steps.count:
                with contextlib.suppress(OSError):  # the loop's thread has ended: no step of its own to add
                    self.steps.add(self._own(self._clock(), self._host.loop.seconds()))
            self._host.close()
            self._host = None
