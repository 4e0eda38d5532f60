"""Signals: pure functions from what a loop produced (losses, a model and a batch, tensors) to measurements.

They hold no state and register nothing that outlives the call, so the collectors, the doctor and the tests call
them alike: loss spikes and their period, the activation census of a probe batch (dead ReLU units, saturated
Tanh and Sigmoid outputs, how the signal grows from layer to layer), the module that produces the output, a
batch's first examples as rows, and the small numeric helpers the collectors share (a median that skips NaN,
the entropy of counts, many 0-d tensors read at once, exact zero counts).
"""

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from statistics import median

import torch
from torch import nn

from harness.batches import flat_rows, rows
from harness.eval_mode import eval_mode
from harness.torch_private import norms

SATURATING = {nn.Tanh: (-1.0, 1.0), nn.Sigmoid: (0.0, 1.0)}  # output bounds of saturating activations


def finite_median(values: Iterable[float]) -> float:
    """The median of the values that are not NaN; NaN when none is left."""
    finite = [v for v in values if not math.isnan(v)]
    return median(finite) if finite else math.nan


def entropy(counts: torch.Tensor) -> torch.Tensor:
    """The entropy (nats) of each row of counts."""
    p = counts / counts.sum(dim=1, keepdim=True).clamp(min=1)
    return -(p * p.clamp(min=1e-300).log()).sum(dim=1)


def read_scalars(values: list[torch.Tensor]) -> list[float]:
    """0-d tensors as Python floats, read in one go (stacked in the widest of their dtypes, which holds them all)."""
    try:
        return torch.stack(values).tolist()
    except RuntimeError:  # on several devices
        return [float(v) for v in values]


def zero_counts(tensors: list[torch.Tensor]) -> list[int]:
    """How many entries of each tensor are exactly 0, in one call where the count stays exact (float32 or wider)."""
    exact = [t.numel() < 1 << 24 and t.dtype in (torch.float32, torch.float64) for t in tensors]
    nonzero = iter(
        read_scalars(norms([t for t, e in zip(tensors, exact, strict=True) if e], order=0)) if any(exact) else []
    )
    return [t.numel() - round(next(nonzero)) if e else int((t == 0).sum()) for t, e in zip(tensors, exact, strict=True)]


def plain_forward(model: nn.Module, x):
    """The model on one input tensor: how the grid's loop and a pair batch call it."""
    return model(x)


def activation_census(model: nn.Module, x, forward: Callable = plain_forward) -> dict:
    """What the activation modules (ReLU, Tanh, Sigmoid) do on the probe batch `x` (the model called by `forward`).

    Returns `dead` (share of ReLU units never positive; a unit is one feature of a (N, F) output or one
    channel of a (N, C, ...) output), `dead_layers` (that share per ReLU module), `saturated` (share of Tanh
    and Sigmoid outputs within 1% of their bounds, where the derivative is nearly 0) and `growth` (RMS of
    the last activation module's output over the first one's: far above 1 when the signal grows layer after
    layer). The probe runs in eval mode without gradients, so it changes no BatchNorm statistics;
    functional calls (F.relu) are not seen, and a measure with no module to read is NaN.
    """
    activity: list[torch.Tensor] = []
    saturated = [0, 0]
    rms: list[float] = []

    def record(module, _inputs, output):
        if output.dim() < 2:
            return
        output = output.detach()
        rms.append(float(output.float().pow(2).mean().sqrt()))
        if isinstance(module, nn.ReLU):
            activity.append(output.transpose(0, 1).reshape(output.shape[1], -1).gt(0).any(dim=1))
        else:
            low, high = SATURATING[type(module)]
            margin = 0.01 * (high - low)
            saturated[0] += int(((output < low + margin) | (output > high - margin)).sum())
            saturated[1] += output.numel()

    kinds = (nn.ReLU, *SATURATING)
    handles = [m.register_forward_hook(record) for m in model.modules() if type(m) in kinds]
    try:
        with eval_mode(model), torch.no_grad():
            forward(model, x)
    finally:
        for handle in handles:
            handle.remove()
    dead = sum(int((~active).sum()) for active in activity)
    return {
        "dead": dead / sum(active.numel() for active in activity) if activity else math.nan,
        "dead_layers": [1.0 - active.float().mean().item() for active in activity],
        "saturated": saturated[0] / saturated[1] if saturated[1] else math.nan,
        "growth": rms[-1] / rms[0] if len(rms) > 1 and rms[0] > 0 else math.nan,
    }


def dead_units(model: nn.Module, x: torch.Tensor) -> tuple[float, list[float]]:
    """Share of ReLU units never positive on the probe batch `x`, overall and per ReLU module."""
    census = activation_census(model, x)
    return census["dead"], census["dead_layers"]


def spikes(
    losses: list[float], window: int = 20, spread: float = 8.0, found: list[int] | None = None, start: int = 0
) -> list[int]:
    """Steps whose loss jumps far out of the range of the `window` steps before it.

    A spike is a loss above the recent median by `spread` times the recent median absolute deviation (so a
    loss that is noisy anyway needs a bigger jump) and above 1.3 times that median. A loss that has plateaued
    (a rate too low, a softmax before the loss) still shows its spikes; a run of consecutive spikes counts once,
    at its first step. Whether a step spiked depends only on the losses up to it, so `found` (the spikes of the
    first `start` losses) lets a longer run's spikes extend a shorter prefix's instead of recomputing them.
    """
    found = list(found or [])
    if not losses or not math.isfinite(losses[0]):
        return found
    floor = 1e-3 * abs(losses[0])  # a perfectly flat stretch would otherwise make any wiggle a spike
    for step in range(max(window, start), len(losses)):
        recent = losses[step - window : step]
        middle = median(recent)
        deviation = max(median(abs(v - middle) for v in recent), floor)
        jumped = losses[step] > middle + spread * deviation and losses[step] > 1.3 * middle
        if jumped and (not found or found[-1] != step - 1):
            found.append(step)
    return found


def periodicity(steps: list[int]) -> tuple[float, int]:
    """The most common gap between consecutive spikes, and how many gaps have it (0 with fewer than 2)."""
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    if not gaps:
        return math.nan, 0
    period = max(sorted(set(gaps)), key=gaps.count)
    return float(period), gaps.count(period)


def example_rows(inputs, targets, limit: int, to_host: bool = True) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first `limit` examples of a batch as (inputs flattened to float rows, targets as given), on the CPU.

    None unless the inputs are floating point (several inputs are laid side by side) with one target row per
    example; `class_labels` (harness/targets.py) turns the targets into class indices where the task has them.
    With `to_host=False` they stay on the batch's device (a copy to the CPU waits for the device).
    """
    if not (torch.is_tensor(targets) and targets.dim() >= 1) or rows(inputs) != len(targets):
        return None
    x = flat_rows(inputs, limit, to_host)
    if x is None:
        return None
    y = targets[: len(x)].detach()
    return (x, y.cpu()) if to_host else (x, y)


def _leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's modules without children, in registration order, losses left out.

    A loss kept as an attribute (`self.loss = nn.CrossEntropyLoss()`, a common pattern) is a leaf module too, and
    often the last one registered, but it computes the loss, not the output.
    """
    return [
        (name, module)
        for name, module in model.named_modules()
        if not list(module.children()) and not isinstance(module, nn.modules.loss._Loss)
    ]


@contextlib.contextmanager
def leaves_run(model: nn.Module) -> Iterator[list[str]]:
    """Inside: the names of the model's leaf modules (`_leaves`) in the order the forward passes run them."""
    ran: list[str] = []
    handles = []
    try:
        for name, module in _leaves(model):
            handles.append(module.register_forward_hook(lambda *_, name=name: ran.append(name)))
        yield ran
    finally:
        for handle in handles:
            handle.remove()


def last_module(model: nn.Module, ran: Sequence[str] = ()) -> str:
    """The module the model's output comes from, as `name (Type)`: its last leaf module to run.

    `ran`: the leaf modules a forward pass ran, in order (`leaves_run`); the last of them produced the output,
    wherever the model registered it (a head registered before the encoder), and a module the forward never uses
    (an auxiliary head, a loss kept as an attribute) is not it. Without `ran`, the last leaf registered, which is
    the order of a Sequential. An activation applied as a function in forward (torch.sigmoid) is not a module
    and is not named.
    """
    leaves = dict(_leaves(model))
    if ran:
        name = ran[-1]
    elif leaves:
        name = list(leaves)[-1]
    else:
        return type(model).__name__
    return f"{name or 'the model'} ({type(leaves[name]).__name__})"
