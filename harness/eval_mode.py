"""Eval mode for a look of the instruments' own, and each module's own mode back afterwards.

`model.train(was_training)` after a look is not a restore: it sets every submodule to the model's flag, so a
loop that keeps some submodules in eval mode inside a training model (a frozen backbone's BatchNorm) would train
them from then on. Nor are `model.eval()` and `model.train()` mere switches: a module may override `train(mode)`
to act, as mmpretrain's VGG freezes its `frozen_stages` there, on either mode. So the flags are set directly, and no
module's `train` runs: the instruments do not change the run they watch (TrainCheck's mmpretrain-702 showed they
did: the doctor's look at the first batch froze the stages the buggy program never froze).
"""

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def eval_mode(model: nn.Module, switch: bool = True) -> Iterator[None]:
    """Run the block with `model` in eval mode (unless `switch` is False), then give every module its own mode back.

    The `training` flags are set directly: no module's own `train(mode)` is called, either way.
    """
    modes = [(module, module.training) for module in model.modules()]
    if switch:
        for module, _ in modes:
            module.training = False
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
