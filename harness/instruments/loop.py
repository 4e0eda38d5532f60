"""The observed loop as every collector sees it, and what a collector is.

`Loop` holds what the collectors share: the loop's pieces (model, optimizer, loss function, batch layout, the
GradScaler under mixed precision), the index of the last step whose backward was seen, the batch being trained
on, the task and loss the first training forward showed, and the census schedule. It measures nothing itself.

A `Collector` measures one thing. It registers its own hooks on the model, the optimizer or the parameters,
hears of each batch (`see`) and each backward pass (`after_backward`) from the observer (harness/instruments/
observer.py), returns its own record columns (`columns`), and removes its hooks (`close`). It declares those
columns in its class attribute `COLUMNS` (harness/column.py): the record's table is assembled from these
(harness/columns.py), and tests/test_columns.py checks that each collector returns exactly what it declares.
"""

import contextlib
import math
from collections.abc import Callable

import torch
from torch import nn

from harness.batches import BatchLayout, to_device
from harness.column import Column
from harness.torch_private import unscaled_already


class Loop:
    """The pieces of the observed loop and where it is; the collectors read it, the observer moves it on."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable,
        layout: BatchLayout,
        scaler: "torch.amp.GradScaler | None",
        census_every: int,
    ):
        self.model, self.optimizer, self.loss_fn, self.layout = model, optimizer, loss_fn, layout
        self.scaler = scaler  # None without mixed precision (or with a disabled scaler)
        self.named_params = list(model.named_parameters())
        self.census_every = census_every
        self.step = -1  # index of the step whose backward was seen last
        self.last_inputs = None  # the last batch's inputs (a tensor, or a tuple or dict of them) and targets
        self.last_targets: torch.Tensor | None = None
        self.task: str | None = None  # read from the first training forward (harness/targets.py)
        self.loss_kind = "other"  # what the loss computes, named on the first training forward
        # Class indices: the output's width, read with the loss; labels outside [0, classes) are the loss's to ignore
        # (its ignore_index) and every collector leaves them out (harness/targets.py: in_classes).
        self.classes: int | None = None
        self.own_forward = False  # the instruments' own forward passes are not the loop's: hooks leave them alone
        # Read on every step, so plain attributes rather than properties (advance sets them).
        self.census_now = False  # whether step `step` is a census step (its backward was seen last)
        self.census_next = True  # whether the next step is (step 0 always is): its batch and forward are read

    def is_census_step(self, step: int) -> bool:
        """Every `census_every` steps, and at steps 0, 1, 2, 4, 8, ... below it: a short run gets several."""
        return step % self.census_every == 0 or (step < self.census_every and step & (step - 1) == 0)

    def advance(self) -> None:
        """The loop's backward of its next step is done: move the step on, and read the census schedule once."""
        self.step += 1
        self.census_now = self.is_census_step(self.step)
        self.census_next = self.is_census_step(self.step + 1)

    @contextlib.contextmanager
    def own_forward_pass(self):
        """Around a forward pass of the instruments' own: the hooks on the model do not count it as the loop's."""
        self.own_forward = True
        try:
            yield
        finally:
            self.own_forward = False

    def on_model_device(self, inputs):
        return to_device(inputs, next(self.model.parameters()).device)

    def grad_scale(self) -> float:
        """What `.grad` is multiplied by now: the GradScaler's scale, until the loop has called unscale_ (else 1).

        NaN where the scaler cannot say whether unscale_ ran (harness/torch_private.py: `unscaled_already`).
        """
        if self.scaler is None:
            return 1.0
        # A loop that calls after_backward after unscale_ reads true gradients too. Where the scaler cannot say
        # whether unscale_ ran, .grad is not measurable: NaN rather than a gradient off by the scale.
        unscaled = unscaled_already(self.scaler, self.optimizer)
        if unscaled is None:
            return math.nan
        if unscaled:
            return 1.0
        scale = float(self.scaler.get_scale())
        return scale if scale > 0 else math.nan  # halved to 0 (every step skipped): nothing left to read


class Collector:
    """One measurement of the loop: its hooks, its state and its columns. Every event is optional."""

    # The columns `columns(final=True)` returns; those declared per_budget are the ones `columns(final=False)` does.
    COLUMNS: tuple[Column, ...] = ()

    def see(self, inputs, targets) -> None:
        """A batch the loop is about to train on, split into inputs and targets (also in `loop.last_*`)."""

    def after_backward(self, loss: torch.Tensor) -> None:
        """The loop's backward pass of step `loop.step` is done; the optimizer has not stepped yet."""

    def columns(self, final: bool) -> dict:
        """The scalar columns of the loop so far; with `final`, also the lists and names kept for the record."""
        return {}

    def close(self) -> None:
        """Remove the hooks: the loop runs on without them."""


def before_update(optimizer: torch.optim.Optimizer, read: Callable[[torch.optim.Optimizer], None]):
    """Register `read(optimizer)` to run just before each optimizer update; returns the hook's handle.

    That is the step's pre-hook for `step()` as most loops call it. A `step(closure)` runs the forward and
    backward inside the step, after the pre-hook (LBFGS; Lightning without a GradScaler, whose closure also
    clips): there the read runs after each call of the closure, just before the update. Reads registered this
    way on one optimizer run in the order they were registered, with or without a closure.
    """

    def pre_hook(optimizer, args, kwargs):
        if not kwargs and len(args) == 1:  # step() as most loops call it: args[0] is the optimizer itself
            read(optimizer)
            return None
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            read(optimizer)
            return None

        def closure_then_read():
            result = closure()
            read(optimizer)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_read}
        return (args[0], closure_then_read, *args[2:]), kwargs

    return optimizer.register_step_pre_hook(pre_hook)
