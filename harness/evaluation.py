"""Evaluation: mean loss and accuracy of a classifier over batches, without changing the model or its mode."""

import math

import torch
from torch import nn


def evaluate(model: nn.Module, loss_fn, batches, eval_mode: bool = True) -> tuple[float, float]:
    """Mean loss and accuracy over (x, y) batches, in eval mode on the model's device; its mode is restored.

    eval_mode=False evaluates in whatever mode the model is in: the fault of validating with dropout on.
    """
    device = next(model.parameters()).device
    was_training = model.training
    if eval_mode:
        model.eval()
    total = loss_sum = hits = 0.0
    with torch.no_grad():
        for batch in batches:
            x, y = batch[0].to(device), batch[1].to(device)
            logits = model(x)
            loss_sum += float(loss_fn(logits, y)) * len(y)
            hits += float((logits.argmax(dim=1) == y).sum())
            total += len(y)
    model.train(was_training)
    return (loss_sum / total, hits / total) if total else (math.nan, math.nan)
