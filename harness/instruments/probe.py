"""The probe batch: a fixed handful of the loop's own training examples that the model is run on again.

The activation census (dead and saturated units) and the output checks read the model on the same examples at
the start and at the end. The probe is the first batch, grown from the next ones until it holds PROBE_EXAMPLES
examples: a unit "never active" on a single example means nothing. The first batch's input RMS is measured here
too: inputs far from unit scale (unstandardized features) are a fault of their own.
"""

import math

import torch

from harness.batches import head, input_rms, join, rows, same_shape
from harness.column import F64, Column
from harness.instruments.loop import Collector

PROBE_EXAMPLES = 16  # the probe batch: the first batch, grown from the next ones when it is smaller (the grid's
# smallest batch is 16, so its cells are probed on their first batch)


class Probe(Collector):
    """The probe's inputs (as the layout takes them from a batch) and targets, and the first batch's input RMS."""

    COLUMNS = (
        Column(
            "input_rms",
            F64,
            "root mean square of the first batch's inputs (standardized data: about 1)",
            per_budget=True,
        ),
    )

    def __init__(self):
        self.inputs = None  # None until the first batch is seen
        self.targets: torch.Tensor | None = None
        self.growing = True  # until the probe holds PROBE_EXAMPLES examples (or a batch of another shape)
        self.input_rms = math.nan

    def see(self, inputs, targets) -> None:
        if self.inputs is None:
            self.inputs, self.targets = inputs, targets
            self.input_rms = input_rms(inputs)
            self.growing = rows(inputs) < PROBE_EXAMPLES
        elif self.growing:
            self._grow(inputs, targets)

    def _grow(self, x, y) -> None:
        """Small batches: the probe grows from the next batches to PROBE_EXAMPLES examples (of the same shape)."""
        if not same_shape(x, self.inputs) or rows(x) != len(y):
            return
        if y.shape[1:] != self.targets.shape[1:] or y.dtype != self.targets.dtype:
            return
        room = PROBE_EXAMPLES - rows(self.inputs)
        self.inputs = join([self.inputs, head(x, room)])
        self.targets = torch.cat([self.targets, y[:room].detach()])
        self.growing = rows(self.inputs) < PROBE_EXAMPLES

    def complete(self) -> bool:
        """Whether the probe holds PROBE_EXAMPLES examples (False before the first batch)."""
        return self.inputs is not None and rows(self.inputs) >= PROBE_EXAMPLES

    def columns(self, final: bool) -> dict:
        return {"input_rms": self.input_rms}
