"""Input independence: whether anything the model computes moves when its inputs change.

A model that never reads its inputs (a placeholder of zeros left from testing the shapes, a mask that zeros every
feature, a forward that reads a stored tensor instead of its argument) can learn only the class prior. Its loss
then sits where a model that has not learned yet sits too, so the loss alone cannot tell the two apart; the model
itself can. On the probe batch (harness/instruments/probe.py), in eval mode, without gradients and with the random
number generators' states given back afterwards, the model runs four times:
1. on the batch as it is;
2. on it again: an output that changes between two identical calls (a model that draws random numbers in eval
   mode, or carries state from call to call) cannot be probed, and the effect is NaN;
3. on the batch with every input tensor replaced by zeros;
4. on the batch with the inputs shuffled across it: rolled by one example, so that each example gets another's
   inputs against its own target (no random number is drawn).

`altered_input_loss_ratio` is the loss the loop's loss function gives on 3 and 4 over the loss on 1, the smaller of
the two: a model that has learned from its inputs loses much more when they are taken away (a healthy digits run:
tens of times), one that does not read them loses the same (1). It is NaN where the loss cannot be called on the
probe or its loss on the real inputs is not above 0. A ratio near 1 is also what a model that has not learned yet,
or whose units all died, shows: `altered_input_effect` says where the inputs are lost. It is the largest change,
over 3 and 4, of what the model's first layer is handed (the first module with parameters of its own that the
forward calls) and of the model's output, each over its RMS on 1. A model that reads its inputs hands its first
layer other values when they change (about 1 for zeroed inputs), whatever it has learned, and whether or not its
units are alive; one that does not read them computes on the same values and gives the same output, to the bit: 0.
"""

import math

import torch

from harness.batches import BatchError, apply, rows, tensors
from harness.column import F64, Column
from harness.eval_mode import eval_mode
from harness.instruments.loop import Collector, Loop
from harness.instruments.probe import Probe

REPEAT_TOLERANCE = 1e-6  # two identical calls whose outputs differ by more than this (over their RMS): not probed


class InputDependence(Collector):
    """The loss and what the model computes on the probe batch with its inputs zeroed and shuffled, against as is."""

    COLUMNS = (
        Column(
            "altered_input_loss_ratio",
            F64,
            "the loss on the probe batch with its inputs zeroed, and with them shuffled across the batch, over the"
            " loss on them as they are: the smaller of the two (1: the loss does not depend on the inputs); NaN"
            " where that loss is 0 or cannot be computed",
            per_budget=True,
        ),
        Column(
            "altered_input_effect",
            F64,
            "the largest change, with the probe batch's inputs zeroed or shuffled, of what the model's first layer"
            " is handed and of its output, each over its RMS (0: nothing the model computes moves with its inputs);"
            " NaN where two identical calls differ",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop, probe: Probe):
        self.loop, self.probe = loop, probe

    def columns(self, final: bool) -> dict:
        ratio, effect = self.measure()
        return {"altered_input_loss_ratio": ratio, "altered_input_effect": effect}

    def measure(self) -> tuple[float, float]:
        inputs, targets = self.probe.inputs, self.probe.targets
        if inputs is None or not tensors(inputs):
            return math.nan, math.nan
        altered = [apply(inputs, torch.zeros_like)]
        if rows(inputs) > 1:
            altered.append(apply(inputs, lambda t: t.roll(1, dims=0) if t.dim() else t))
        loop = self.loop
        device = next(loop.model.parameters()).device
        try:
            with (
                torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type),
                loop.own_forward_pass(),
                eval_mode(loop.model),
                torch.no_grad(),
            ):
                runs = [self._run(loop.on_model_device(batch)) for batch in (inputs, inputs, *altered)]
        except BatchError:  # an output the doctor cannot read: not measured
            return math.nan, math.nan
        (first_in, out), (_, again), *changed = runs
        if not torch.is_tensor(out) or not torch.is_tensor(again) or out.shape != again.shape:
            return math.nan, math.nan
        ratio = self._loss_ratio(out, [o for _, o in changed], targets)
        if _change(out, again) > REPEAT_TOLERANCE:
            return ratio, math.nan
        effects = [_change(out, o) for _, o in changed]
        if first_in is not None:  # a model whose forward calls no layer of its own: its output alone says
            effects += [_change(first_in, i) for i, _ in changed]
        return ratio, max(effects)

    def _run(self, batch) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The model's output on `batch`, and the tensors its first layer with parameters of its own was handed."""
        model, handed = self.loop.model, []
        layers = [m for name, m in model.named_modules() if name and any(True for _ in m.parameters(False))]

        def read(_module, args, kwargs) -> None:
            if not handed:
                values = [t.detach().double().reshape(-1) for t in tensors((args, kwargs))]
                handed.append(torch.cat(values) if values else torch.zeros(0, dtype=torch.float64))

        hooks = [layer.register_forward_pre_hook(read, with_kwargs=True) for layer in layers]
        try:
            out = self.loop.layout.forward(model, batch)
        finally:
            for hook in hooks:
                hook.remove()
        return (handed[0] if handed else None), out

    def _loss_ratio(self, out: torch.Tensor, changed: list, targets) -> float:
        """The smaller of the altered inputs' losses over the real inputs' (NaN where a loss cannot be had)."""
        if targets is None or not changed:
            return math.nan
        targets = targets.to(out.device)
        try:
            real = float(self.loop.loss_fn(out, targets))
            losses = [float(self.loop.loss_fn(o, targets)) for o in changed if torch.is_tensor(o)]
        except Exception:  # noqa: BLE001 - a loss that cannot take the probe's output as it is: not measured
            return math.nan
        if not math.isfinite(real) or real <= 0 or not losses:
            return math.nan
        return min(losses) / real


def _change(before: torch.Tensor | None, after: torch.Tensor | None) -> float:
    """The RMS of after - before over the RMS of before (0 where neither moved; inf where one is missing)."""
    if before is None or after is None or before.shape != after.shape:
        return math.inf
    before, after = before.detach().double(), after.detach().double()
    if torch.equal(before, after):
        return 0.0
    moved = float((after - before).pow(2).mean().sqrt())
    scale = float(before.pow(2).mean().sqrt())
    if not math.isfinite(moved):  # an altered input made the output non-finite: it moved
        return math.inf
    return moved / scale if scale > 0 else math.inf
