"""The model family of the grid: a small MLP whose constructor carries the model-side fault knobs.

Faults that live in the model (too narrow, dead ReLU units, frozen layers) are arguments here, so a fault
config only overrides `model.*` values and no fault needs code of its own.
"""

import itertools
from collections.abc import Sequence

from torch import nn


class MLP(nn.Module):
    """Linear-ReLU blocks followed by a linear head.

    hidden: widths of the hidden layers.
    bias_init: if set, every hidden bias starts at this constant (a large negative value leaves the ReLU
        units inactive for every input, so no gradient reaches them).
    frozen_layers: indices of hidden Linear layers whose parameters get requires_grad=False, as when a
        fine-tuning script freezes a backbone and never unfreezes it.
    """

    def __init__(
        self,
        n_inputs: int,
        n_classes: int,
        hidden: Sequence[int] = (64, 64),
        bias_init: float | None = None,
        frozen_layers: Sequence[int] = (),
    ):
        super().__init__()
        widths = [n_inputs, *hidden]
        blocks: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            linear = nn.Linear(fan_in, fan_out)
            if bias_init is not None:
                nn.init.constant_(linear.bias, bias_init)
            if i in frozen_layers:
                linear.requires_grad_(False)
            blocks += [linear, nn.ReLU()]
        unknown = set(frozen_layers) - set(range(len(hidden)))
        if unknown:
            raise ValueError(f"frozen_layers {sorted(unknown)} name no hidden layer (0..{len(hidden) - 1})")
        blocks.append(nn.Linear(widths[-1], n_classes))
        self.net = nn.Sequential(*blocks)

    def forward(self, x):
        return self.net(x)
