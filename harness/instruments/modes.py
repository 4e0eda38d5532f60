"""Train/eval mode: training forwards run in eval mode, and evaluation forwards left in training mode.

Dropout and BatchNorm act differently in the two modes: training in eval mode trains without dropout and on
frozen BatchNorm statistics; evaluating in train mode scores a noisy model and moves BatchNorm's statistics. A
forward with gradients enabled is a training forward, one without an evaluation forward. A model with neither
kind of layer is not hooked at all: there the mode changes nothing. A dropout layer whose probability is 0 is not
such a layer: it returns its input in both modes (transformers built with dropout 0 keep their Dropout modules).
"""

import torch
from torch import nn

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop


def acts_by_mode(module: nn.Module) -> bool:
    """Whether the module computes something else in eval mode than in training mode.

    Every dropout kind (Dropout, Dropout1d/2d/3d, AlphaDropout, ...) that drops anything, and BatchNorm (batch
    statistics in training, running ones in eval).
    """
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    return isinstance(module, nn.modules.batchnorm._BatchNorm)


class Modes(Collector):
    """Counts of the loop's training and evaluation forwards, and of those in the other mode."""

    COLUMNS = (
        Column(
            "train_in_eval_share",
            F64,
            "share of training forwards run in eval mode (0 without dropout/BatchNorm)",
            per_budget=True,
        ),
        Column(
            "eval_in_train_share",
            F64,
            "share of evaluation forwards run in training mode (0 without them)",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop):
        self.loop = loop
        self.has_modes = any(acts_by_mode(m) for m in loop.model.modules())
        self.forwards = {"train": 0, "train_in_eval": 0, "eval": 0, "eval_in_train": 0}
        # Hooks cost their call on every step of a loop whose step may take a millisecond: only where the mode
        # changes something.
        self._hook = loop.model.register_forward_pre_hook(self._before_forward) if self.has_modes else None

    def _before_forward(self, model, _inputs) -> None:
        if self.loop.own_forward or not self.has_modes:
            return  # without dropout or BatchNorm the mode changes nothing
        if torch.is_grad_enabled():  # a training forward
            self.forwards["train"] += 1
            self.forwards["train_in_eval"] += not model.training
        else:  # an evaluation forward
            self.forwards["eval"] += 1
            self.forwards["eval_in_train"] += model.training

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()

    def columns(self, final: bool) -> dict:
        forwards = self.forwards
        return {
            "train_in_eval_share": forwards["train_in_eval"] / forwards["train"] if forwards["train"] else 0.0,
            "eval_in_train_share": forwards["eval_in_train"] / forwards["eval"] if forwards["eval"] else 0.0,
        }
