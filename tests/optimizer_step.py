"""The end of a step that the tests' hand-written loops share: clipping, the GradScaler's step, the optimizer's."""

from torch import nn


def clip_and_step(model: nn.Module, optimizer, scaler=None, clip: float = 0.0, unscale: bool = True) -> None:
    """Clip the gradient's norm to `clip` (0: not clipped), then step the optimizer, through `scaler` where given.

    `unscale`: with a scaler, call unscale_ before clipping (False: the loop clipped the scaled gradient, or had
    unscaled it already).
    """
    if clip:
        if scaler is not None and unscale:
            scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
