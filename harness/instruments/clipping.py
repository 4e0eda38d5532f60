"""Clipping: how much of the gradient's norm after backward is left when the optimizer steps.

Read without being told of any clipping: after each census, the norm of all of `.grad` after the last backward
before the optimizer step (unscaled), against its norm at the step itself (after whatever unscale_ and
clip_grad_norm_ the loop did). 1 exactly on a step nothing clipped; clip_grad_norm_ at max_norm m keeps m / norm.
A loop that clips while the gradients are still scaled (before GradScaler.unscale_) keeps far less.
"""

import math

import torch

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import finite_median
from harness.torch_private import norms

CLIPPED = 1 - 1e-4  # a step whose gradient norm fell below this share of its norm after backward was clipped


class Clipping(Collector):
    """Per measured optimizer step: the gradient's norm at the step over its norm after backward."""

    COLUMNS = (
        Column(
            "grad_kept_at_step",
            F64,
            "median over the optimizer steps after each census: gradient norm at the step over its (unscaled) norm "
            "after the last backward (1 = not clipped)",
            per_budget=True,
        ),
        Column(
            "clipped_step_share",
            F64,
            "share of those steps whose gradient norm was cut (by clipping) at the step",
            per_budget=True,
        ),
    )

    CENSUS_ONLY = True  # reads the norms of census steps

    def __init__(self, loop: Loop):
        self.loop = loop
        self.kept_at_step: list[float] = []
        self._norm_after_backward = math.nan
        self._due = False
        self._step_hook = loop.before_update(self._before_update, when="watched")  # census cycles are

    def after_backward(self, loss) -> None:
        if self.loop.census_now:
            self._due = True
        if self._due:  # every backward until the step: with accumulation the last one is what is stepped
            self._norm_after_backward = self._grad_norm() / self.loop.grad_scale()

    def _before_update(self, _optimizer) -> None:
        if self._due:
            # Called after the loop's unscale_ and clip_grad_norm_ (GradScaler.step unscales before it steps).
            at_step = self._grad_norm()
            if math.isfinite(at_step) and math.isfinite(self._norm_after_backward) and self._norm_after_backward > 0:
                self.kept_at_step.append(at_step / self._norm_after_backward)
            self._due = False

    def _grad_norm(self) -> float:
        """The norm of all of `.grad` together, as clip_grad_norm_ computes it (as stored: scaled, under AMP)."""
        grads = [p.grad for _, p in self.loop.named_params if p.grad is not None]
        if not grads:
            return math.nan
        return float(torch.linalg.vector_norm(torch.stack(norms(grads)).float()))

    def close(self) -> None:
        self._step_hook.remove()

    def columns(self, final: bool) -> dict:
        return {
            "grad_kept_at_step": finite_median(self.kept_at_step),
            "clipped_step_share": sum(k < CLIPPED for k in self.kept_at_step) / len(self.kept_at_step)
            if self.kept_at_step
            else math.nan,
        }
