"""Optimizer steps: how many the loop took, and how many backward passes each one followed.

A plain loop takes one backward pass per optimizer step; a loop that accumulates gradients on purpose takes k.
Read from the optimizer's step hook, so a step the GradScaler skipped (gradients not finite) is not counted.
"""

from harness.column import F64, I64, Column
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import finite_median


class OptimizerSteps(Collector):
    """The optimizer steps taken, and the backward passes before each."""

    COLUMNS = (
        Column(
            "backwards_per_step",
            F64,
            "median backward passes per optimizer step (k when accumulating over k batches)",
            per_budget=True,
        ),
        Column("optimizer_steps", I64, "optimizer steps taken", per_budget=True),
    )

    SAMPLED = True  # backward passes per optimizer cycle: read on the watched ones (the steps on all)

    def __init__(self, loop: Loop):
        self.loop = loop
        self.optimizer_steps = 0
        self.backwards_per_step: list[int] = []
        self._backwards_since_step = 0
        self._step_hook = loop.after_update(self._after_update)

    def after_backward(self, loss) -> None:
        self._backwards_since_step += 1

    def _after_update(self, _optimizer, _args, _kwargs) -> None:
        self.optimizer_steps += 1  # every step (the GradScaler's skipped share reads the count)
        if not self.loop.watching:
            return  # a cycle the doctor's cost budget does not watch: its backward passes were not counted either
        self.backwards_per_step.append(self._backwards_since_step)
        self._backwards_since_step = 0

    def close(self) -> None:
        self._step_hook.remove()

    def columns(self, final: bool) -> dict:
        return {
            # Per optimizer step: median backward passes (1 in a plain loop, k when accumulating on purpose).
            "backwards_per_step": finite_median(self.backwards_per_step),
            "optimizer_steps": self.optimizer_steps,
        }
