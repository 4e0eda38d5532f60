"""Mixed precision: the GradScaler's scale, and the optimizer steps it skipped.

A GradScaler halves its scale at each step whose scaled gradients were not finite, and skips that step; a run
whose scale keeps falling is losing steps. The scale is read at each census and as the run stops; the halvings
between two reads count the steps skipped. Without a scaler every column is NaN.
"""

import math

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop
from harness.instruments.optimizer_steps import OptimizerSteps


class AmpScale(Collector):
    """The scale at each census, and the steps skipped (its scale halves at each)."""

    COLUMNS = (
        Column(
            "amp_scale_min",
            F64,
            "the GradScaler's smallest scale (read at census steps and at the end; none: NaN)",
            per_budget=True,
        ),
        Column("amp_scale_last", F64, "the GradScaler's scale at the end", per_budget=True),
        Column(
            "amp_skipped_share",
            F64,
            "share of optimizer steps the GradScaler skipped for inf/NaN gradients (scale halved)",
            per_budget=True,
        ),
    )

    CENSUS_ONLY = True  # reads the scale at census steps

    def __init__(self, loop: Loop, steps: OptimizerSteps):
        self.loop, self.steps = loop, steps
        self.scales: list[float] = []
        self.skipped_steps = 0
        self._read_at = -1  # the step of the last read

    def after_backward(self, loss) -> None:
        if self.loop.census_now and self.loop.scaler is not None:
            self._read_scale()

    def _read_scale(self) -> None:
        """The scale at this census; each halving since the last one is a step the scaler skipped (non-finite)."""
        scale = float(self.loop.scaler.get_scale())
        last = self.scales[-1] if self.scales else math.nan
        if 0 < scale < last:
            self.skipped_steps += round(math.log2(last / scale))
        elif scale == 0 < last:  # halved below float32's smallest number (2^-149) on the way
            self.skipped_steps += round(math.log2(last / 2**-149)) + 1
        elif scale == last == 0:  # at 0 nothing halves any more, and every step is skipped
            self.skipped_steps += self.loop.step - self._read_at
        self.scales.append(scale)
        self._read_at = self.loop.step

    def columns(self, final: bool) -> dict:
        if self.loop.scaler is not None:
            self._read_scale()  # the scale as the run stops, and the steps skipped since the last census
        taken = self.steps.optimizer_steps
        return {
            "amp_scale_min": min(self.scales, default=math.nan),
            "amp_scale_last": self.scales[-1] if self.scales else math.nan,
            "amp_skipped_share": self.skipped_steps / (self.skipped_steps + taken)
            if self.loop.scaler is not None and self.skipped_steps + taken
            else math.nan,
        }
