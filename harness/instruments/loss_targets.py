"""Targets at the loss: whether the loss receives the targets the batch handed over, row for row.

A loop that permutes, mixes or re-pairs the targets after the batch was handed over (labels shuffled inside the
loop, a mix-up, a re-indexing that touches the targets and not the inputs) trains on examples paired with the
wrong answers, and nothing in the batch shows it. Read where the loss receives them: a forward pre-hook on the
loss (an `nn.Module`; a plain function cannot be hooked, and the share stays unmeasured), armed only while the
next step is a census step and only for the loop's own training forward.

Rows are compared as labels, so that a change of encoding is not a change of targets: a row of class scores
(one-hot, smoothed) is read as its argmax, integer targets as they are, and real values (regression, a 0/1 target
cast to float) by their rank in the batch, which a rescaling or a shift keeps and a permutation does not. A
loss target of another number of rows than the batch (a sequence flattened another way, a subset) is not compared.
"""

import math

import torch
from torch import nn

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop


def row_labels(targets: torch.Tensor) -> torch.Tensor:
    """One value per target row: the argmax of rows of scores (one-hot, smoothed), else the values, flattened."""
    if targets.is_floating_point() and targets.dim() >= 2 and targets.shape[-1] > 1:
        return targets.argmax(dim=-1).reshape(-1)
    return targets.reshape(-1)


def ranks(values: torch.Tensor) -> torch.Tensor:
    """Each value's rank in the batch (ties in order): a shift or a rescaling keeps them, a permutation does not."""
    return values.argsort(stable=True).argsort()


def rows_changed(handed: torch.Tensor, received: torch.Tensor) -> torch.Tensor | None:
    """Per row of the loss's targets: whether it differs from the batch's row; None if the two do not pair."""
    before, after = row_labels(handed.to(received.device)), row_labels(received)
    if before.shape != after.shape:
        return None
    if before.is_floating_point() or after.is_floating_point():  # real values: compared by rank, not by value
        before, after = ranks(before), ranks(after)
    return before != after


class LossTargets(Collector):
    """Per census step: how many target rows at the loss differ from the batch's rows (summed on the device)."""

    COLUMNS = (
        Column(
            "targets_changed_share",
            F64,
            "share of target rows the loss received (census steps) that differ from the batch's (NaN: loss not a "
            "Module)",
            per_budget=True,
        ),
    )

    CENSUS_ONLY = True  # hooks the loss of census steps

    def __init__(self, loop: Loop):
        self.loop = loop
        self.hookable = isinstance(loop.loss_fn, nn.Module)
        self._batch_targets: torch.Tensor | None = None  # this step's batch targets, until the loss has read them
        self._changed: torch.Tensor | None = None  # rows changed, summed without a device sync per step
        self.rows = 0
        self._hook = None

    def see(self, inputs, targets) -> None:
        if not (self.hookable and self.loop.census_next and torch.is_tensor(targets)):
            self._batch_targets = None
            return
        self._batch_targets = targets
        if self._hook is None:
            self._hook = self.loop.loss_fn.register_forward_pre_hook(self._before_loss, with_kwargs=True)

    def _before_loss(self, _loss_fn, args, kwargs) -> None:
        given = self._batch_targets
        if given is None or self.loop.own_forward or not torch.is_grad_enabled():
            return
        self._batch_targets = None  # the first loss of the step: an evaluation or a second loss is not its target
        self._hook.remove()
        self._hook = None
        received = kwargs.get("target", args[1] if len(args) > 1 else None)
        if not torch.is_tensor(received):
            return
        with torch.no_grad():
            changed = rows_changed(given, received.detach())
        if changed is None:
            return
        self._changed = changed.sum() if self._changed is None else self._changed + changed.sum()
        self.rows += changed.numel()

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def columns(self, final: bool) -> dict:
        share = float(self._changed) / self.rows if self.rows else math.nan
        return {"targets_changed_share": share}
