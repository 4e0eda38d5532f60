"""The probe batch: a fixed handful of the loop's own training examples that the model is run on again.

The activation census (dead and saturated units) and the output checks read the model on the same examples at
the start and at the end. The probe is the first batch, grown from the next ones until it holds PROBE_EXAMPLES
examples: a unit "never active" on a single example means nothing. The first batch's input RMS is measured here
too: inputs far from unit scale (unstandardized features) are a fault of their own.

Inputs with no floating-point values (uint8 pixels, integer features) are cast inside the model's forward: their
scale is the one the model's first layer sees, read by `first_layer_input` on a forward of the first batch (the
doctor's, at its first batch: doctor/watch.py) and handed over with `scale_seen_by_model`. Token ids into an
embedding have no scale: the RMS stays NaN. The grid's inputs are floating point, so its records never take this
path.
"""

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from harness.batches import floats, head, input_rms, join, rows, same_shape, tensors
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

    def scale_seen_by_model(self, first: "FirstLayer") -> str:
        """Inputs with no floating-point values: the RMS the model's first layer saw instead of NaN.

        Returns why the input scale was not measured ("" when it was, or when the inputs hold floats of their own).
        """
        if self.inputs is None or floats(self.inputs) or not tensors(self.inputs):
            return ""
        self.input_rms = first.rms
        return first.unmeasured

    def columns(self, final: bool) -> dict:
        return {"input_rms": self.input_rms}


EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)  # take token ids: no scale to read


@dataclass
class FirstLayer:
    """What the model's first layer (the first module with parameters of its own that a forward called) was handed.

    `rms`: the RMS of its floating-point inputs (NaN when it took none); `unmeasured`: why no scale was read, ""
    when one was or when the layer is an embedding (token ids have no scale: nothing to judge, nothing to say).
    """

    name: str = ""
    rms: float = math.nan
    unmeasured: str = "no layer with parameters of its own was called: the model's forward computes with its own"


@contextlib.contextmanager
def first_layer_input(model: nn.Module) -> Iterator[FirstLayer]:
    """Read what the model's first layer is handed on the forward inside the block (hooks removed after it).

    The root module is not a layer here: its inputs are the batch's own, before the forward casts them.
    """
    first = FirstLayer()
    layers = [(name, m) for name, m in model.named_modules() if name and any(True for _ in m.parameters(False))]

    def read(name: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if first.name:
            return
        first.name = f"{name} ({type(module).__name__})"
        values = floats((args, kwargs))
        if values:
            first.rms, first.unmeasured = input_rms(values), ""
        elif isinstance(module, EMBEDDINGS):
            first.unmeasured = ""
        else:
            first.unmeasured = f"the model's first layer, {first.name}, takes no floating-point values"

    hooks = [
        module.register_forward_pre_hook(
            lambda m, args, kwargs, name=name: read(name, m, args, kwargs), with_kwargs=True
        )
        for name, module in layers
    ]
    try:
        yield first
    finally:
        for hook in hooks:
            hook.remove()
