"""Data wait: how long the loop waited for its batches, against how long it ran.

A loop whose loader cannot keep up spends most of its time waiting for the next batch: a bigger model or a faster
device would not make it faster, a faster loader would. The wait is timed around each `next()` of the batch
iterator (`timed`), or handed over by a loop the instruments do not iterate (`add`, from `see`).

On a busy host the operating system takes the CPU away from the loop, and from its loader's worker processes, now
and then, for milliseconds at a time (8 to 30 ms seen on the 2-core machine under a load of 5 to 8). Counted as
waiting for data, those pauses moved the verdict with whatever else ran on the machine: a healthy in-memory loader
read as starved (a pause inside one of its 60 short `next()`s weighs as much as all its loading), and a loader that
sleeps on its files read as spending more than the whole loop (no compute left to compare with: not measured).
With `exclude_host_pauses` (the doctor's) the ratio is the one the loop shows on a host of its own:

- a `next()` during which the loop's thread never blocked (it indexed and collated the batch itself, as a
  DataLoader without workers does) waited its thread's CPU time, wherever a pause fell;
- a `next()` that blocked (on a worker's queue, a disk, a sleep) waited its wall time less the time the loop's
  thread spent ready to run but waiting for a CPU during it (Linux's run-queue delay, `/proc/<task>/schedstat`),
  and less the most run-queue time any of the loader's worker processes spent during it (the worker whose batch it
  waited for queued no longer than that): the loader's own cost, its computing, sleeps and reads (`HostQueues`);
- the loop's time leaves out its thread's run-queue time from the first batch on, so that its own compute (loop
  less waits) is never below zero on a busy host;
- the interpreter's garbage collections are counted in neither (`GarbageCollections`). A full collection walks
  every object the process holds: in a process holding millions (a long test session, a notebook) one takes 0.1 to
  1 s, whatever the loader does. One that fell inside the first `next()` of a healthy run under the slow tests
  made its wait seven times its compute (CI, at 7a916f2).

What the run queue does not show still moves the ratio: a CPU shared with a busy hyperthread computes slower, on
the loop's thread and in a loader's workers alike; torch's intra-op threads spin at each operation's barrier for
whichever of them is off its CPU, so a step on a busy host computes longer while its thread runs; workers more than
the CPUs queue behind each other and count as if each had a CPU of its own; a pin-memory thread's waits for a CPU
count as the loader's.

Why the run queue for a blocked wait, and not the CPU time of the loader's work: a loader that reads files, or
decodes with a library that releases the GIL, costs the loop wall time it spends asleep, which no CPU clock counts.
Why not a probe of the loop fed from memory: the doctor does not own a user's training step, so it cannot re-run it
on cached batches.

The grid's cells time as before (wall clock), so that their records do not change; without those counters (not
Linux) the doctor times so too. The reads cost about 3 µs per batch, and as much again per worker.
"""

import gc
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from harness.column import F64, Column
from harness.instruments.loop import Collector

try:
    import resource
except ImportError:  # Windows: the wait is timed by the wall clock
    resource = None

SCHEDSTAT = "/proc/thread-self/schedstat"  # the calling thread's: CPU time, run-queue delay (ns), time slices
CHILDREN = "/proc/thread-self/children"  # the processes the calling thread started (a DataLoader's workers)
# A wait shorter than this is taken as timed (one read of the run queues fewer): the OS's pauses come in slices of
# milliseconds, and a shorter one moves no ratio.
PAUSE_FLOOR_S = 5e-4


def thread_usage() -> tuple[float, int]:
    """The calling thread's CPU seconds (exact: CLOCK_THREAD_CPUTIME_ID) and how often it blocked (voluntarily)."""
    return time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


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
        if not hasattr(resource, "RUSAGE_THREAD"):  # Linux's: a thread's own count of the times it blocked
            return None
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


class GarbageCollections:
    """Seconds the interpreter spent in full garbage collections while registered (`gc.callbacks`).

    Only the full ones (generation 2) walk the whole heap; the young generations' take microseconds. Wall and CPU
    seconds both, by `clock` and `cpu_clock` (the CPU seconds are those of the thread that collected: every Python
    thread waits for it, as it holds the GIL). Registered by `DataWait.timed` while it times, and always removed
    after: the collector is told of each collection, and changes none.
    """

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, cpu_clock: Callable[[], float] = time.thread_time
    ):
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self._clock, self._cpu_clock = clock, cpu_clock
        self._began: tuple[float, float] | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._began = (self._clock(), self._cpu_clock())
        elif self._began is not None:  # "stop"
            wall, cpu = self._began
            self.wall_s += self._clock() - wall
            self.cpu_s += self._cpu_clock() - cpu
            self._began = None

    def register(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def unregister(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class DataWait(Collector):
    """Seconds spent waiting for batches, and the loop's own seconds since it asked for the first one.

    `exclude_host_pauses`: take the time the loop's thread and its loader's workers waited for a CPU, and the
    interpreter's garbage collections, off both (see the module docstring). `clock`, `host_queues` and `usage` are
    the wall clock, the maker of the run-queue reader and the loop's thread's CPU time and count of blocks, given by
    tests to script a busy host.
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
        usage: Callable[[], tuple[float, int]] = thread_usage,
    ):
        self.wait_s = 0.0
        self.loop_start: float | None = None
        self.exclude_host_pauses = exclude_host_pauses
        self.loader_workers = math.nan
        self._clock = clock
        self._host_queues = host_queues
        self._host: HostQueues | None = None  # the loop's run queues, once timed() runs (and can read them)
        self._queued_at_start = 0.0  # the loop's thread's run-queue seconds when it asked for its first batch
        self._queued_total = 0.0  # the loop's seconds waiting for a CPU, kept once closed
        self._usage = usage
        # Told of each full collection while timed() times (host pauses only), by the same clocks as the waits.
        self._collections = GarbageCollections(clock, lambda: usage()[0])

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
        first, collections = True, self._collections
        if self.exclude_host_pauses:
            collections.register()
        try:
            while True:
                start = self._clock()
                before = (host.read(), self._usage()) if host is not None else None
                collected = (collections.wall_s, collections.cpu_s)
                if self.loop_start is None:
                    self.loop_start = start
                    self._queued_at_start = before[0][0] if before is not None else 0.0
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                waited = self._clock() - start
                if self.exclude_host_pauses and waited >= PAUSE_FLOOR_S:
                    waited = self._own_wait(waited, host, before, collected)
                if host is not None and first:
                    host.first_batch_came()
                first = False
                yield batch, waited
        finally:  # a loop that breaks, raises or ends: the collector is told of no collection after it
            collections.unregister()

    def _own_wait(self, waited: float, host: "HostQueues | None", before: tuple | None, collected: tuple) -> float:
        """A wall-clock wait without the host's pauses and the collections that fell in it (module docstring)."""
        collections = self._collections
        if host is None:  # no run queues to read (not Linux, or another thread): only the collections come off
            return max(0.0, waited - (collections.wall_s - collected[0]))
        (queues, usage), (cpu, blocked) = before, self._usage()
        if blocked == usage[1]:
            # It never blocked: it was computing the batch itself, or ready to but without a CPU. Its CPU time is
            # the wait, wherever a pause fell (even around these reads), less its collections' CPU time.
            return max(0.0, min(waited, cpu - usage[0]) - (collections.cpu_s - collected[1]))
        host_s = host.taken_out(queues, host.read())
        return max(0.0, waited - host_s - (collections.wall_s - collected[0]))

    def add(self, waited_s: float) -> None:
        """The loop waited `waited_s` seconds for its next batch; the first one also starts the loop's clock."""
        if self.loop_start is None:
            self.loop_start = self._clock() - waited_s
        self.wait_s += waited_s

    def columns(self, final: bool) -> dict:
        paused = self._queued_s() + self._collections.cpu_s  # both 0 unless exclude_host_pauses
        elapsed = self._clock() - self.loop_start - paused if self.loop_start is not None else math.nan
        measured = {
            "data_wait_s": self.wait_s,
            "loop_s": elapsed,
            "data_wait_share": self.wait_s / elapsed if elapsed > 0 else math.nan,
        }
        return measured | {"loader_workers": self.loader_workers} if final else measured

    def _queued_s(self) -> float:
        """The loop's thread's seconds waiting for a CPU since the loop began (0 where not read)."""
        if self._host is None:
            return self._queued_total
        try:
            return self._host.loop.seconds() - self._queued_at_start
        except OSError:  # the loop's thread has ended (it was not the one finishing): its pauses stay in the loop
            return 0.0

    def close(self) -> None:
        """The run's pauses as they stand at the end (columns() follows), and the files closed."""
        self._collections.unregister()
        if self._host is not None:
            self._queued_total = self._queued_s()
            self._host.close()
            self._host = None
