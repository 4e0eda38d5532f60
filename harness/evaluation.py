"""Evaluation: mean loss and score of a model over batches, without changing the model or its mode.

The score is accuracy for the classification tasks (per position for a sequence) and R² for regression
(harness/targets.py); the task is read from the first batch unless given. Batches are (inputs, targets) pairs
unless a `layout` says where a batch keeps them (harness/batches.py: dicts, several inputs, a model returning an
object).
"""

import math

import torch
from torch import nn

from harness.batches import BatchLayout, to_device
from harness.eval_mode import eval_mode as eval_mode_of
from harness.targets import Scorer, in_classes, task_of


def evaluate(
    model: nn.Module,
    loss_fn,
    batches,
    eval_mode: bool = True,
    task: str | None = None,
    layout: BatchLayout | None = None,
) -> tuple[float, float]:
    """Mean loss and score over (x, y) batches, in eval mode on the model's device; each module's mode is restored.

    eval_mode=False evaluates in whatever mode the model is in: the fault of validating with dropout on.
    """
    device = next(model.parameters()).device
    total = loss_sum = 0.0
    scorer = None
    with eval_mode_of(model, switch=eval_mode), torch.no_grad():
        for batch in batches:
            if layout is None:
                x, y = batch[0].to(device), batch[1].to(device)
                outputs = model(x)
            else:
                x, y = layout.split(batch, "validation")
                x, y = to_device(x, device), y.to(device)
                outputs = layout.forward(model, x)
            if scorer is None:
                scorer = Scorer(task or task_of(y, outputs))
            # A sequence's loss is a mean over the positions it does not ignore: weighted by those, not by examples
            # (a batch of padding alone has no loss to weigh).
            weight = int(in_classes(y, outputs.shape[-1]).sum()) if scorer.task == "sequence" else len(y)
            if weight:
                loss_sum += float(loss_fn(outputs, y)) * weight
            scorer.add(outputs, y)
            total += weight
    return (loss_sum / total, scorer.value()) if total else (math.nan, math.nan)
