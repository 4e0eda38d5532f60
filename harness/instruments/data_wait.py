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
  delay, /proc/thread-self/schedstat), read when the loop starts and when it ends.

The grid's cells time as before (wall clock), so that their records do not change; without those counters (not
Linux) the doctor times so too. The reads cost about 3 µs per batch.
"""

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


class DataWait(Collector):
    """Seconds spent waiting for batches, and the loop's own seconds since it asked for the first one.

    `exclude_host_pauses`: take the time the loop's thread waited for a CPU off both (see the module docstring).
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

    def timed(self, batches: Iterable) -> Iterator[tuple[object, float]]:
        """Yield (batch, seconds waited for it) for each batch of `batches`."""
        iterator = iter(batches)
        if self.exclude_host_pauses and self._queue is None and self.loop_start is None:
            self._queue = RunQueue.of_this_thread()
        own = self._queue is not None and self._queue.thread == threading.get_ident()
        while True:
            start = time.perf_counter()
            before = thread_usage() if own else None
            if self.loop_start is None:
                self.loop_start = start
                self._queued_at_start = self._queue.seconds() if own else 0.0
            try:
                batch = next(iterator)
            except StopIteration:
                return
            waited = time.perf_counter() - start
            if before is not None and waited >= PAUSE_FLOOR_S:
                cpu, blocked = thread_usage()
                if blocked == before[1]:
                    # It never blocked: it was computing the batch itself, or ready to but without a CPU. Its CPU
                    # time is the wait, wherever a pause fell (even around these reads).
                    waited = min(waited, cpu - before[0])
            yield batch, waited

    def add(self, waited_s: float) -> None:
        """The loop waited `waited_s` seconds for its next batch; the first one also starts the loop's clock."""
        if self.loop_start is None:
            self.loop_start = time.perf_counter() - waited_s
        self.wait_s += waited_s

    def columns(self, final: bool) -> dict:
        elapsed = time.perf_counter() - self.loop_start - self._queued_s() if self.loop_start is not None else math.nan
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
        if self._queue is not None:
            self._queued_total = self._queued_s()
            self._queue.close()
            self._queue = None
