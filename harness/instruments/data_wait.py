"""Data wait: how long the loop waited for its batches, against how long it ran.

A loop whose loader cannot keep up spends most of its time waiting for the next batch: a bigger model or a faster
device would not make it faster, a faster loader would. The wait is timed around each `next()` of the batch
iterator (`timed`), or handed over by a loop the instruments do not iterate (`add`, from `see`).
"""

import math
import time
from collections.abc import Iterable, Iterator

from harness.column import F64, Column
from harness.instruments.loop import Collector


class DataWait(Collector):
    """Seconds spent waiting for batches, and the loop's own seconds since it asked for the first one."""

    COLUMNS = (
        Column("data_wait_s", F64, "seconds the loop waited for batches", per_budget=True),
        Column("loop_s", F64, "seconds of the training loop", per_budget=True),
        Column("data_wait_share", F64, "data_wait_s / loop_s", per_budget=True),
    )

    def __init__(self):
        self.wait_s = 0.0
        self.loop_start: float | None = None

    def timed(self, batches: Iterable) -> Iterator[tuple[object, float]]:
        """Yield (batch, seconds waited for it) for each batch of `batches`."""
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            if self.loop_start is None:
                self.loop_start = start
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch, time.perf_counter() - start

    def add(self, waited_s: float) -> None:
        """The loop waited `waited_s` seconds for its next batch; the first one also starts the loop's clock."""
        if self.loop_start is None:
            self.loop_start = time.perf_counter() - waited_s
        self.wait_s += waited_s

    def columns(self, final: bool) -> dict:
        elapsed = time.perf_counter() - self.loop_start if self.loop_start is not None else math.nan
        return {
            "data_wait_s": self.wait_s,
            "loop_s": elapsed,
            "data_wait_share": self.wait_s / elapsed if elapsed > 0 else math.nan,
        }
