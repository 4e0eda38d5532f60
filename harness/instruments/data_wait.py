"""Data wait: how long the loop waited for its batches, against how long it ran.

A loop whose loader cannot keep up spends most of its time waiting for the next batch: a bigger model or a faster
device would not make it faster, a faster loader would. The wait is timed around each `next()` of the batch
iterator (`timed`), or handed over by a loop the instruments do not iterate (`add`, from `see`).

On a busy host the operating system takes the CPU away from the loop now and then, for milliseconds at a time
(8 to 30 ms seen on the 2-core machine under a load of 5 to 8). A run of 60 steps of 0.5 ms waits for its
batches about 10 ms in all: one or two such pauses that fall inside a `next()` count as much waiting as the whole
run's loading, and a healthy in-memory DataLoader read as starved. With `exclude_host_pauses` (the doctor's) the
pauses are counted in neither the waits nor the loop's time, so that the ratio is the one the loop shows on an
idle host:

- a `next()` during which the loop's thread never blocked (it indexed and collated the batch itself, as a
  DataLoader without workers does) waited its thread's CPU time; one that blocked (on a worker's queue, a disk, a
  sleep) waited its wall time, as before;
- the loop's time leaves out the time its thread was ready to run but waiting for a CPU (Linux's run-queue
  delay, /proc/thread-self/schedstat), read when the loop starts and when it ends;
- the interpreter's garbage collections are counted in neither (`GarbageCollections`). A full collection walks
  every object the process holds: in a process holding millions (a long test session, a notebook) one takes 0.1 to
  1 s, whatever the loader does. One that fell inside the first `next()` of a healthy run under the slow tests
  made its wait seven times its compute (CI, at 7a916f2).

The grid's cells time as before (wall clock), so that their records do not change; without those counters (not
Linux) the doctor times so too. The reads cost about 3 µs per batch.
"""

import gc
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator

from harness.column import F64, Column
from harness.instruments.loop import Collector

try:
    import resource
except ImportError:  # Windows: the wait is timed by the wall clock
    resource = None

SCHEDSTAT = "/proc/thread-self/schedstat"  # the calling thread's: CPU time, run-queue delay (ns), time slices
# A wait shorter than this is taken as timed (one read of the thread's clocks fewer): the OS's pauses come in slices
# of milliseconds, and a shorter one moves no ratio.
PAUSE_FLOOR_S = 5e-4


def thread_usage() -> tuple[float, int]:
    """The calling thread's CPU seconds (exact: CLOCK_THREAD_CPUTIME_ID) and how often it blocked (voluntarily)."""
    return time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


class RunQueue:
    """The seconds one thread has spent ready to run but waiting for a CPU, read from its schedstat file.

    Opened by the thread it reads (the loop's, the one that iterates the batches); `None` from `of_this_thread`
    where the file, or the thread's own usage, cannot be read (not Linux).
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.thread = threading.get_ident()  # the thread whose file it is

    @classmethod
    def of_this_thread(cls) -> "RunQueue | None":
        if not hasattr(resource, "RUSAGE_THREAD"):  # Linux's: a thread's own count of the times it blocked
            return None
        try:
            queue = cls(os.open(SCHEDSTAT, os.O_RDONLY))
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


class GarbageCollections:
    """Seconds the interpreter spent in its cyclic garbage collector while registered (`gc.callbacks`).

    Wall and CPU seconds both: the CPU seconds are those of the thread that collected (every Python thread waits
    for it to finish: it holds the GIL). Registered by `DataWait.timed` while it times, and always removed after:
    the collector is told of each collection, and changes none.
    """

    def __init__(self):
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self._began: tuple[float, float] | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = (time.perf_counter(), time.thread_time())
        elif self._began is not None:  # "stop"
            wall, cpu = self._began
            self.wall_s += time.perf_counter() - wall
            self.cpu_s += time.thread_time() - cpu
            self._began = None

    def register(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def unregister(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class DataWait(Collector):
    """Seconds spent waiting for batches, and the loop's own seconds since it asked for the first one.

    `exclude_host_pauses`: take the time the loop's thread waited for a CPU, and the interpreter's garbage
    collections, off both (see the module docstring).
    """

    COLUMNS = (
        Column("data_wait_s", F64, "seconds the loop waited for batches", per_budget=True),
        Column("loop_s", F64, "seconds of the training loop", per_budget=True),
        Column("data_wait_share", F64, "data_wait_s / loop_s", per_budget=True),
    )

    def __init__(self, exclude_host_pauses: bool = False):
        self.wait_s = 0.0
        self.loop_start: float | None = None
        self.exclude_host_pauses = exclude_host_pauses
        self._queue: RunQueue | None = None  # the loop's thread's run queue, once timed() runs (and can read it)
        self._queued_at_start = 0.0  # its run-queue seconds when the loop asked for its first batch
        self._queued_total = 0.0  # the loop's seconds waiting for a CPU, kept once closed
        self._collections = GarbageCollections()  # told of each collection while timed() times (host pauses only)

    def timed(self, batches: Iterable) -> Iterator[tuple[object, float]]:
        """Yield (batch, seconds waited for it) for each batch of `batches`."""
        iterator = iter(batches)
        if self.exclude_host_pauses and self._queue is None and self.loop_start is None:
            self._queue = RunQueue.of_this_thread()
        own = self._queue is not None and self._queue.thread == threading.get_ident()
        collections = self._collections
        if self.exclude_host_pauses:
            collections.register()
        try:
            while True:
                start = time.perf_counter()
                before = thread_usage() if own else None
                collected = (collections.wall_s, collections.cpu_s)
                if self.loop_start is None:
                    self.loop_start = start
                    self._queued_at_start = self._queue.seconds() if own else 0.0
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                waited = time.perf_counter() - start
                if self.exclude_host_pauses and waited >= PAUSE_FLOOR_S:
                    waited = self._own_wait(waited, before, collected)
                yield batch, waited
        finally:  # a loop that breaks, raises or ends: the collector is told of no collection after it
            collections.unregister()

    def _own_wait(self, waited: float, before: tuple[float, int] | None, collected: tuple[float, float]) -> float:
        """A wall-clock wait without the host's pauses and the collections that fell in it (module docstring)."""
        collections = self._collections
        if before is not None:
            cpu, blocked = thread_usage()
            if blocked == before[1]:
                # It never blocked: it was computing the batch itself, or ready to but without a CPU. Its CPU time
                # is the wait, wherever a pause fell (even around these reads), less its collections' CPU time.
                return max(0.0, min(waited, cpu - before[0]) - (collections.cpu_s - collected[1]))
        return max(0.0, waited - (collections.wall_s - collected[0]))

    def add(self, waited_s: float) -> None:
        """The loop waited `waited_s` seconds for its next batch; the first one also starts the loop's clock."""
        if self.loop_start is None:
            self.loop_start = time.perf_counter() - waited_s
        self.wait_s += waited_s

    def columns(self, final: bool) -> dict:
        paused = self._queued_s() + self._collections.cpu_s  # both 0 unless exclude_host_pauses
        elapsed = time.perf_counter() - self.loop_start - paused if self.loop_start is not None else math.nan
        return {
            "data_wait_s": self.wait_s,
            "loop_s": elapsed,
            "data_wait_share": self.wait_s / elapsed if elapsed > 0 else math.nan,
        }

    def _queued_s(self) -> float:
        """The loop's thread's seconds waiting for a CPU since the loop began (0 where not read)."""
        if self._queue is None:
            return self._queued_total
        try:
            return self._queue.seconds() - self._queued_at_start
        except OSError:  # the loop's thread has ended (it was not the one finishing): its pauses stay in the loop
            return 0.0

    def close(self) -> None:
        """The run's pauses as they stand at the end (columns() follows), and the file closed."""
        self._collections.unregister()
        if self._queue is not None:
            self._queued_total = self._queued_s()
            self._queue.close()
            self._queue = None
