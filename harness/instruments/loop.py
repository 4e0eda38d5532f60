"""The observed loop as every collector sees it, and what a collector is.

`Loop` holds what the collectors share: the loop's pieces (model, optimizer, loss function, batch layout, the
GradScaler under mixed precision), the index of the last step whose backward was seen, the batch being trained
on, the task and loss the first training forward showed, and the census schedule. It measures nothing itself.

Under the doctor's cost budget (harness/instruments/budget.py) not every optimizer cycle is watched: `watching`
says whether the one under way is, and a collector whose class sets `SAMPLED = True` is told of batches and
backward passes on watched cycles only (its own hooks check `watching`); one that sets `CENSUS_ONLY` is told of
the steps around a census only; the others hear of every step.

A `Collector` measures one thing. It registers its own hooks on the model, the optimizer or the parameters,
hears of each batch (`see`) and each backward pass (`after_backward`) from the observer (harness/instruments/
observer.py), returns its own record columns (`columns`), and removes its hooks (`close`). It declares those
columns in its class attribute `COLUMNS` (harness/column.py): the record's table is assembled from these
(harness/columns.py), and tests/test_columns.py checks that each collector returns exactly what it declares.
"""

import contextlib
import math
import time
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
        # Whether forward()'s output (through the layout) is what the loss compares. False where the doctor found the
        # loss reading another prediction (a decoder in the step): the readings of the output as a prediction (its
        # probabilities, reach, spread, causality) are then not taken; the structural ones (layers) still are.
        self.output_is_prediction = True
        # Read on every step, so plain attributes rather than properties (advance sets them).
        self.census_now = False  # whether step `step` is a census step (its backward was seen last)
        self.census_next = True  # whether the next step is (step 0 always is): its batch and forward are read
        # Whether every collector reads the optimizer cycle under way (harness/instruments/budget.py); without a cost
        # budget (the grid's cells) always. `watch_next` is the decision for the next cycle, taken before its step.
        self.watching = True
        self.watch_next = True
        # Under a cost budget, whether a census may be taken at a step (the census's own cost is in the budget); a
        # census the schedule wanted and the budget refused is taken at the next step it allows. None: every one.
        self.census_gate: Callable[[int], bool] | None = None
        self._census_owed = False
        self.census_cycle = False  # a census step's backward was seen in the optimizer cycle under way
        # The collectors' reads around each optimizer update, run by one pre-hook and one post-hook of the loop's
        # (a hook each costs its call on every step): (read, when), `when` one of READ_WHEN.
        self._before_reads: list[tuple[Callable, str]] = []
        self._after_reads: list[tuple[Callable, str]] = []
        self._step_hooks: list | None = None
        self.spend: Callable[[float], None] | None = None  # a cost budget's clock for the reads' time (None: none)
        self.decide_next: Callable[[], bool] | None = None  # a cost budget's decision: is the next cycle watched?

    def is_census_step(self, step: int) -> bool:
        """Every `census_every` steps, and at steps 0, 1, 2, 4, 8, ... below it: a short run gets several."""
        return step % self.census_every == 0 or (step < self.census_every and step & (step - 1) == 0)

    def advance(self) -> None:
        """The loop's backward of its next step is done: move the step on, and read the census schedule once."""
        self.step += 1
        self.census_now = self.census_next  # decided a step ahead: the step's batch and forward were read for it
        self.census_next = self._census_at(self.step + 1)

    def _census_at(self, step: int) -> bool:
        """Whether `step` is a census step: the schedule's, or the first the cost budget allows after one it refused."""
        if self.is_census_step(step):
            # Never two scheduled censuses refused in a row, whatever the budget: the rules read the census's curves
            # over the whole run (a trend, a median over the later half), at worst at half the schedule's density.
            if self.census_gate is None or self._census_owed or self.census_gate(step):
                self._census_owed = False
                return True
            self._census_owed = True
            return False
        # Owed: taken after a cycle the budget let the instruments watch (asking the budget every step costs more).
        if self._census_owed and self.watching:
            self._census_owed = False
            return True
        return False

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

    # ----- the reads around each optimizer update ---------------------------------------------------------------
    def before_update(self, read: Callable[[torch.optim.Optimizer], None], when: str = "always") -> "StepRead":
        """Run `read(optimizer)` just before each optimizer update (after a `step(closure)`'s closure).

        `when`: "always"; "watched" on the optimizer cycles watched in full and those holding a census step;
        "arming" when the next cycle is watched (a read that prepares the next cycle's). In registration order.
        """
        return self._add(self._before_reads, read, when)

    def after_update(self, read: Callable[[torch.optim.Optimizer, tuple, dict], None], when: str = "always"):
        """Run `read(optimizer, args, kwargs)` just after each optimizer update; `when` as for before_update."""
        return self._add(self._after_reads, read, when)

    def _add(self, reads: list, read: Callable, when: str) -> "StepRead":
        if when not in READ_WHEN:
            raise ValueError(f"unknown `when` {when!r}: choose {', '.join(READ_WHEN)}")
        entry = (read, when)
        reads.append(entry)
        if self._step_hooks is None:
            self._step_hooks = [
                before_update(self.optimizer, self._run_before),
                self.optimizer.register_step_post_hook(self._run_after),
            ]
        return StepRead(self, reads, entry)

    def _runs(self, when: str) -> bool:
        if when == "always":
            return True
        if when == "arming":
            return self.watch_next
        return self.watching or self.census_cycle

    def _run_before(self, optimizer) -> None:
        start = time.perf_counter()
        for read, when in self._before_reads:
            if when == "always" or self._runs(when):
                read(optimizer)
        if self.decide_next is not None:  # before the post reads: those that arm the next cycle read it
            self.watch_next = self.decide_next()
        if self.spend is not None:
            self.spend(start)

    def _run_after(self, optimizer, args, kwargs) -> None:
        start = time.perf_counter()
        for read, when in self._after_reads:
            if when == "always" or self._runs(when):
                read(optimizer, args, kwargs)
        self.census_cycle = False  # the cycle is over; the next begins
        self.watching = self.watch_next
        if self.spend is not None:
            self.spend(start)

    def _drop(self, reads: list, entry: tuple) -> None:
        if entry in reads:
            reads.remove(entry)
        if not self._before_reads and not self._after_reads and self._step_hooks is not None:
            for hook in self._step_hooks:
                hook.remove()
            self._step_hooks = None


READ_WHEN = ("always", "watched", "arming")


class StepRead:
    """The handle of a read registered around the optimizer update: `remove()` takes it off."""

    def __init__(self, loop: Loop, reads: list, entry: tuple):
        self._loop, self._reads, self._entry = loop, reads, entry

    def remove(self) -> None:
        self._loop._drop(self._reads, self._entry)


class Collector:
    """One measurement of the loop: its hooks, its state and its columns. Every event is optional."""

    # The columns `columns(final=True)` returns; those declared per_budget are the ones `columns(final=False)` does.
    COLUMNS: tuple[Column, ...] = ()
    # Whether it may read only the watched optimizer cycles (a share, a median) rather than every step of the loop.
    SAMPLED = False
    # Whether its `see` and `after_backward` do anything only on a census step and the steps either side of one:
    # on the cycles a cost budget does not watch, it is told of those steps only.
    CENSUS_ONLY = False

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
