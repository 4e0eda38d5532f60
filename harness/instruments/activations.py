"""Activations: dead ReLU units, saturated Tanh and Sigmoid outputs, and the signal's growth through the layers.

Measured on the probe batch (harness/instruments/probe.py) twice: on the initial weights (a unit dead from the
start, an initialization that saturates or blows the signal up) and on the weights as they are now (units that
died during training, as a rate too high leaves them). See `activation_census` in signals.py for the measures.
"""

import math

import torch

from harness.column import F64, NOT_ALONG_THE_RUN, Column, list_of
from harness.instruments.loop import Collector, Loop
from harness.instruments.probe import Probe
from harness.instruments.signals import activation_census


def not_measured() -> dict:
    """The census of a model never run on a probe: every measure NaN, no ReLU layer."""
    return {"dead": math.nan, "dead_layers": [], "saturated": math.nan, "growth": math.nan}


class Activations(Collector):
    """The activation census at the first step and now, on the probe batch."""

    COLUMNS = (
        Column(
            "dead_unit_share_init",
            F64,
            "share of ReLU units never active on the probe batch, at initialization",
            per_budget=True,
        ),
        Column("dead_unit_share", F64, "the same after training", per_budget=True),
        Column("dead_unit_share_layers", list_of(F64), "after training, per ReLU module", along=NOT_ALONG_THE_RUN),
        Column(
            "saturated_share_init",
            F64,
            "share of Tanh/Sigmoid outputs within 1% of their bounds, at initialization",
            per_budget=True,
        ),
        Column("saturated_share", F64, "the same after training", per_budget=True),
        Column(
            "activation_growth_init",
            F64,
            "RMS of the last activation module's output over the first's, at init",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop, probe: Probe):
        self.loop, self.probe = loop, probe
        self.init_census: dict = {}
        self._init_state: dict | None = None  # the weights at the first step, while a small probe grows

    def see(self, inputs, targets) -> None:
        # The probe is complete: the census on the initial weights, at the next census step (it reads its values
        # back to the host, which waits for the device; between census steps the instruments read nothing).
        if self._init_state is not None and not self.probe.growing and self.loop.census_next:
            self._census_at_init()

    def after_backward(self, loss) -> None:
        if self.loop.step != 0:
            return
        if self.probe.complete():
            self.init_census = self._census()
        elif self.probe.inputs is not None:  # wait for more examples; keep the weights as they are (no update yet)
            self._init_state = self._weights()

    def _census(self) -> dict:
        with self.loop.own_forward_pass():
            return activation_census(
                self.loop.model, self.loop.on_model_device(self.probe.inputs), self.loop.layout.forward
            )

    def _weights(self) -> dict:
        """A copy of the model's state (parameters and buffers), to put back with load_state_dict."""
        return {k: v.detach().clone() for k, v in self.loop.model.state_dict().items()}

    def _census_at_init(self) -> None:
        """The activation census on the initial weights, put back for the census and then replaced by today's."""
        initial, self._init_state = self._init_state, None
        with torch.no_grad():
            now = self._weights()
            self.loop.model.load_state_dict(initial)  # in place: the optimizer keeps its references
            try:
                self.init_census = self._census()
            finally:
                self.loop.model.load_state_dict(now)

    def columns(self, final: bool) -> dict:
        if self._init_state is not None:  # the loop ended before the probe grew: census on what there is
            self._census_at_init()
        now = self._census() if self.probe.inputs is not None else not_measured()
        init = self.init_census or not_measured()
        scalars = {
            "dead_unit_share_init": init["dead"],
            "dead_unit_share": now["dead"],
            "saturated_share_init": init["saturated"],
            "saturated_share": now["saturated"],
            "activation_growth_init": init["growth"],
        }
        return {**scalars, "dead_unit_share_layers": now["dead_layers"]} if final else scalars
