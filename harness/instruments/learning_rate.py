"""Learning rate: the rate the optimizer steps with, against the rate it was built with.

Read from the optimizer's first param group just before each update, without being told of any scheduler: a
warmup that never ends leaves the peak and the last rate a fraction of the built one. A scheduler keeps the rate
it started from in the group's "initial_lr"; without one the rate of the first step is the built one. A schedule
that kills the rate early (a per-epoch decay stepped per batch) leaves most steps at a sliver of the highest rate
the run had used before them (lr_decayed_share), which a cosine over the whole run does only in its last seventh.
"""

import math

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop

DECAYED = 0.05  # a rate under this share of the highest one used before it has all but stopped the training


class LearningRate(Collector):
    """The built rate, the highest and the last rate of the optimizer's first param group, and how long it lay dead."""

    COLUMNS = (
        Column(
            "lr_built",
            F64,
            "the optimizer's rate before any schedule (param group 0's initial_lr, else its first lr)",
            per_budget=True,
        ),
        Column("lr_peak_share", F64, "the highest rate any optimizer step used, over lr_built", per_budget=True),
        Column("lr_last_share", F64, "the last optimizer step's rate, over lr_built", per_budget=True),
        Column(
            "lr_decayed_share",
            F64,
            "share of optimizer steps whose rate was under 5% of the highest rate a step had used before it",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop):
        self.lr_built = math.nan
        self.lr_peak = math.nan
        self.lr_last = math.nan
        self.steps = 0
        self.decayed_steps = 0  # optimizer steps whose rate was under DECAYED x the highest rate used before them
        self._step_hook = loop.before_update(self._before_update)

    def _before_update(self, optimizer) -> None:
        group = optimizer.param_groups[0]
        lr = float(group["lr"])  # as a scheduler left it for this step
        if math.isnan(self.lr_built):
            self.lr_built = float(group.get("initial_lr", lr))  # schedulers keep the rate they started from here
        self.steps += 1
        if lr < DECAYED * self.lr_peak:
            self.decayed_steps += 1
        if not lr <= self.lr_peak:  # also while the peak is NaN: no step read yet
            self.lr_peak = lr
        self.lr_last = lr

    def close(self) -> None:
        self._step_hook.remove()

    def columns(self, final: bool) -> dict:
        return {
            "lr_built": self.lr_built,
            "lr_peak_share": self.lr_peak / self.lr_built if self.lr_built > 0 else math.nan,
            "lr_last_share": self.lr_last / self.lr_built if self.lr_built > 0 else math.nan,
            "lr_decayed_share": self.decayed_steps / self.steps if self.steps else math.nan,
        }
