"""Memorization: whether a fresh model from the run's own factory can fit a handful of the run's examples.

The one check that needs a model of its own: it trains new models at fixed sensible rates, full batch, with
none of the run's optimizer settings. A run that cannot fit its data while a fresh model of the same kind
memorizes a few examples points at the run's training (its rate, its gradients); a model that cannot memorize
even these points at the model itself (dead units from the start, an output that cannot reach the targets).
"""

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from harness.batches import tensors
from harness.instruments.signals import plain_forward


def memorize(
    model_factory: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable,
    rates: Iterable[float] = (1e-4, 1e-3, 1e-2),
    steps: int = 300,
    seed: int = 0,
    check: Callable[[], None] = lambda: None,
    forward: Callable = plain_forward,
) -> dict:
    """Can a fresh model fit these few examples? Adam at each rate, full batch, `steps` steps each.

    Uses the run's model factory and examples but none of its optimizer settings, so a bad rate or a
    forgotten zero_grad in the run cannot make this fail. `check` is called every step (time limits); `forward`
    calls the model on `x` (inputs of several tensors, a model returning an object: harness/batches.py).
    Returns the final loss per rate (eval mode, on the same examples) and the best of them.
    """
    rates = [float(r) for r in rates]
    finals = []
    for rate in rates:
        with torch.random.fork_rng(devices=[]):  # the run's own RNG stream is left untouched
            torch.manual_seed(seed)
            model = model_factory().to(tensors(x)[0].device)
        optimizer = torch.optim.Adam(model.parameters(), lr=rate)
        model.train()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(forward(model, x), y).backward()
            optimizer.step()
            check()
        model.eval()
        with torch.no_grad():
            finals.append(float(loss_fn(forward(model, x), y)))
    best = min(range(len(rates)), key=lambda i: finals[i] if math.isfinite(finals[i]) else math.inf)
    return {
        "memorize_rates": rates,
        "memorize_losses": finals,
        "memorize_best_loss": finals[best] if math.isfinite(finals[best]) else math.nan,
        "memorize_best_rate": rates[best] if math.isfinite(finals[best]) else math.nan,
    }
