"""Causality: whether a next-token model's output at a position changes with the tokens after that position.

A model trained to predict token t + 1 must read only the tokens up to t. One that reads later tokens (self-attention
without its causal mask, a bidirectional recurrent layer, a convolution padded on both sides) finds its own answer in
its input: it learns to copy it, and at generation time the answer is not there. The loss shows this only once the
copy is learned, and a short run or a small model may still be learning it. The model's own outputs show it from
the first step. This collector asks the model directly instead of inferring it from the loss.

On the probe batch (harness/instruments/probe.py), in eval mode and without gradients, the model runs three times:
1. on the batch as it is;
2. on it again: an output that changes between two identical calls (dropout left on in eval mode, a model that
   carries state from call to call) cannot be probed, and the reading is NaN;
3. on the batch with the tokens from a cut on replaced by another window's (the batch rolled by one example; a
   batch of one window takes its own later tokens reversed).
The cut is the median position of the targets the loss scores: the window's middle, where every position is scored.
A model that reads only earlier tokens gives the same outputs before the cut: those positions saw the same tokens,
and each output row is computed from its own position's inputs the same way. `future_token_effect` is the largest
change of the scored outputs before the cut, over their root mean square. It is 0 for a causal model, up to
rounding. Only scored positions count: a prefix whose labels the loss ignores may read the whole prefix by design
(a prefix language model), and padding's outputs answer nothing.

Which input holds the tokens, and whether the task is next-token prediction at all, is read from the probe's batch:
an integer input shaped like the targets whose next token is the label at most of the scored positions. Other
tasks are NaN, because there reading later tokens is the design: a bidirectional encoder's masked tokens or tags,
whose labels are not the next input. The same holds for a window of one token, an output not per position, or
outputs that are not finite (a diverged model).
"""

import math

import torch

from harness.batches import BatchError, apply, tensors
from harness.column import F64, Column
from harness.eval_mode import eval_mode
from harness.instruments.loop import Collector, Loop
from harness.instruments.probe import Probe
from harness.targets import in_classes

# Most scored positions must have the next input token as their label for the task to be next-token prediction: a
# text whose labels are its own inputs (not shifted) matches the next token only where a byte repeats.
NEXT_TOKEN_SHARE = 0.5
# Two identical calls whose outputs differ by more than this (over their RMS) make the probe unreadable.
REPEAT_TOLERANCE = 1e-6


def next_token_input(inputs, targets: torch.Tensor, classes: int | None) -> torch.Tensor | None:
    """The inputs' token tensor where the task is next-token prediction: its next token is the label at most places.

    An integer tensor among the inputs shaped like the (B, T) targets, whose token at t + 1 is the label at t at more
    than NEXT_TOKEN_SHARE of the scored positions. None for any other task.
    """
    if not torch.is_tensor(targets) or targets.dim() != 2 or targets.shape[1] < 2:
        return None
    labels = targets[:, :-1]
    scored = in_classes(labels, classes)
    if not bool(scored.any()):
        return None
    for tensor in tensors(inputs):
        if tensor.shape != targets.shape or tensor.is_floating_point() or tensor.dtype == torch.bool:
            continue
        following = tensor[:, 1:].to(labels.device)
        if float((following == labels)[scored].float().mean()) > NEXT_TOKEN_SHARE:
            return tensor
    return None


class Causality(Collector):
    """How much a next-token model's outputs before a cut move when only the tokens from the cut on change."""

    COLUMNS = (
        Column(
            "future_token_effect",
            F64,
            "next-token tasks: the largest change of the scored outputs before a cut (the median scored position)"
            " when only the tokens from the cut on are replaced, over the outputs' RMS (0 for a model that reads only"
            " earlier tokens); NaN for other tasks and outputs that differ between two identical calls",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop, probe: Probe):
        self.loop, self.probe = loop, probe

    def columns(self, final: bool) -> dict:
        return {"future_token_effect": self.future_token_effect()}

    def tokens(self) -> torch.Tensor | None:
        """The probe's token tensor, where its task is next-token prediction (its labels the next input tokens)."""
        if not self.loop.output_is_prediction:  # the loss reads another prediction than forward()'s
            return None
        if self.probe.inputs is None:
            return None
        return next_token_input(self.probe.inputs, self.probe.targets, self.loop.classes)

    def future_token_effect(self) -> float:
        tokens = self.tokens()
        if tokens is None:
            return math.nan
        # The cut: the median position of the scored targets. The outputs compared are the scored ones before it,
        # and the tokens changed are those from it on.
        scored = in_classes(self.probe.targets, self.loop.classes)
        cut = max(1, int(scored.nonzero()[:, 1].median()))
        before_cut = scored[:, :cut]
        if not bool(before_cut.any()):
            return math.nan
        changed = tokens.clone()
        if len(tokens) > 1:
            changed[:, cut:] = tokens.roll(1, dims=0)[:, cut:]
        else:
            changed[:, cut:] = tokens[:, cut:].flip(1)
        if torch.equal(changed, tokens):  # every window ends in the same tokens: no change to probe with
            return math.nan
        altered = apply(self.probe.inputs, lambda t: changed if t is tokens else t)
        loop = self.loop
        try:
            as_is = loop.on_model_device(self.probe.inputs)  # moved once, run twice
            with loop.own_forward_pass(), eval_mode(loop.model), torch.no_grad():
                first, again, moved = (
                    loop.layout.forward(loop.model, inputs) for inputs in (as_is, as_is, loop.on_model_device(altered))
                )
        except BatchError:  # an output the doctor cannot read: not measured
            return math.nan
        if first.dim() < 2 or first.shape[:2] != tokens.shape or not bool(torch.isfinite(first).all()):
            return math.nan
        before_cut = before_cut.to(first.device)
        before = first[:, :cut][before_cut].double()
        scale = float(before.pow(2).mean().sqrt())
        repeat = float((again[:, :cut][before_cut].double() - before).abs().max())
        if scale == 0 or repeat > REPEAT_TOLERANCE * scale:
            return math.nan
        return float((moved[:, :cut][before_cut].double() - before).abs().max()) / scale
