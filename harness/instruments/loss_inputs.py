"""Loss inputs: the prediction and the target exactly as the loss received them, whatever computed them.

The model's `forward()` output is not always what the loss reads. Lightning's README decodes the output in
`training_step` before its loss; PyTorch's transformer tutorial reshapes it in the loop; a classifier may put
`torch.relu` on its logits outside its last module; a Hugging Face model computes its loss inside `forward`. The
output collector (outputs.py) reads `forward()`, which is right for the structural checks (layers, activations);
this collector reads the loss's own arguments, on census steps, for the facts about them:

- a floor on the logits a loss that takes raw scores got (a ReLU or `clamp(min=0)` on them, wherever applied):
  scores at 0 and none below get no gradient and can never be pushed down, so whole classes never win;
- values handed to `nll_loss` above 0, which log-probabilities never are: probabilities (a softmax where
  `log_softmax` belongs) or raw scores, and a likelihood loss that goes negative;
- a prediction and a target of different shapes that an elementwise loss broadcasts into another computation
  than one comparison per element (an output of (B, 1) against targets of (B,) compares every pair: (B, B)).

How: a `TorchFunctionMode` (torch.overrides, public) is active from the census step's batch to its backward, and
records every call of `torch.nn.functional`'s losses with gradients on; an `nn.Module` loss (`nn.CrossEntropyLoss`,
`nn.MSELoss`, a Hugging Face model's own) calls these too, so one mechanism sees functional losses, loss modules and
losses computed inside a model. Of the calls of a step, the one read is the one whose result the loss handed to
`after_backward` was computed from (its autograd graph, walked through the public `grad_fn.next_functions`): a
loss computed elsewhere (a regularizer, an evaluation under `no_grad`, the instruments' own forwards) is not read.
Why a mode rather than the loss module's forward hook: a plain function (`F.cross_entropy`, Lightning's usual
`training_step`) cannot be hooked, and the loss tensor's graph no longer holds its inputs once backward has freed
them. The mode costs a Python call per torch function while active, on census steps only (docs/architecture.md).

Readings stay on the model's device until the columns are read (no host read between census steps); shapes are
compared on the host, which reads no tensor value.
"""

import math
import threading

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from harness.column import F64, STR, Column
from harness.instruments.loop import Collector, Loop

# torch.nn.functional's losses by what they compute (the names of harness/targets.py's LOSSES where they overlap).
LOSS_FUNCTIONS = {
    F.cross_entropy: "cross_entropy",
    F.nll_loss: "nll",
    F.binary_cross_entropy_with_logits: "bce_logits",
    F.binary_cross_entropy: "bce",
    F.mse_loss: "mse",
    F.l1_loss: "l1",
    F.smooth_l1_loss: "smooth_l1",
    F.huber_loss: "huber",
    F.soft_margin_loss: "soft_margin",
    F.multilabel_soft_margin_loss: "multilabel_soft_margin",
    F.kl_div: "kl_div",
    F.poisson_nll_loss: "poisson_nll",
}
# Losses that take raw scores (logits) and apply their own softmax or sigmoid: a floor on the scores is a fault.
SCORE_LOSSES = ("cross_entropy", "bce_logits", "soft_margin", "multilabel_soft_margin")
# Losses that compare prediction and target element by element, broadcasting shapes that differ.
ELEMENTWISE_LOSSES = ("mse", "l1", "smooth_l1", "huber", "bce", "bce_logits", "soft_margin", "kl_div", "poisson_nll")
# Negative log-likelihoods: never below 0 on inputs in their domain.
LIKELIHOOD_LOSSES = ("cross_entropy", "nll", "bce", "bce_logits")
GRAPH_NODES = 256  # how much of the loss's graph is walked to find the recorded call (a sum of a few terms is small)


class LossCall:
    """One call of a loss function: what it computes, its prediction and target (detached), and its result."""

    __slots__ = ("kind", "node", "prediction", "result", "target")

    def __init__(self, kind: str, prediction: torch.Tensor, target, result):
        self.kind, self.prediction = kind, prediction.detach()
        self.target = target.detach() if torch.is_tensor(target) else None
        self.result = result.detach() if torch.is_tensor(result) else None
        self.node = result.grad_fn if torch.is_tensor(result) else None  # where it sits in the loss's graph


class LossCalls(TorchFunctionMode):
    """While entered: records the calls of torch.nn.functional's losses made with gradients on, in order.

    Modes are disabled inside their own handler, so a loss calling another (nothing in torch does today) would be
    recorded once, as the outer call. `ignore()` says when a call is the instruments' own (their forwards).
    """

    entered = 0  # how many are entered now, on any thread (the tests hold it at 0 between tests)

    def __init__(self, ignore=lambda: False):
        super().__init__()
        self.calls: list[LossCall] = []
        self.ignore = ignore

    def __enter__(self):
        LossCalls.entered += 1
        return super().__enter__()

    def __exit__(self, *exc):
        result = super().__exit__(*exc)  # raises where this context's stack does not hold it (counted still)
        LossCalls.entered -= 1
        return result

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        kind = LOSS_FUNCTIONS.get(func)
        if kind is not None and torch.is_grad_enabled() and not self.ignore():
            prediction = args[0] if args else kwargs.get("input")
            target = args[1] if len(args) > 1 else kwargs.get("target")
            if torch.is_tensor(prediction):
                self.calls.append(LossCall(kind, prediction, target, result))
        return result


def computed_from(loss: torch.Tensor, calls: list[LossCall]) -> LossCall | None:
    """The first recorded call whose result `loss` was computed from: a node of its graph.

    A loss handed over detached (the Lightning and Hugging Face callbacks detach it) has no graph: then the call
    whose result has its value, else the step's only call. None where none can be told.
    """
    if not torch.is_tensor(loss):
        return None
    if loss.grad_fn is None:
        same = [c for c in calls if c.result is not None and c.result.shape == loss.shape and _same(c.result, loss)]
        return same[-1] if same else calls[0] if len(calls) == 1 else None
    nodes = {call.node: call for call in calls if call.node is not None}
    if not nodes:
        return None
    seen, frontier, found = {loss.grad_fn}, [loss.grad_fn], []
    while frontier and len(seen) <= GRAPH_NODES:
        node = frontier.pop(0)
        if node in nodes:
            found.append(nodes[node])
            continue  # what a loss's own graph holds is its prediction's, not another loss
        for parent, _ in node.next_functions:
            if parent is not None and parent not in seen:
                seen.add(parent)
                frontier.append(parent)
    return min(found, key=calls.index) if found else None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two loss values agree (one host read, on a census step)."""
    return bool(torch.allclose(a.float(), b.detach().float().to(a.device), rtol=1e-5, atol=0.0))


def floor_share(prediction: torch.Tensor) -> torch.Tensor | None:
    """Share of the scores exactly at 0 where none is below 0 (0 where any is): the floor of a ReLU or clamp(min=0).

    Exactly 0: a ReLU or clamp cuts every score below it to 0.0 itself, while continuous scores (a healthy head, a
    sigmoid's, those of a model whose rows are all alike because it ignores its input) are never exactly 0. None
    where it means nothing: fewer than two values, every value the same (a constant output: constant_output's), or
    rows that are probabilities (non-negative, summing to 1 over the classes: double_softmax's).
    """
    if prediction.numel() < 2 or not prediction.is_floating_point():
        return None
    scores = prediction.float()
    lowest, highest = scores.amin(), scores.amax()
    if prediction.dim() >= 2 and prediction.shape[1] > 1:
        rows_sum_to_one = ((scores.sum(dim=1) - 1).abs() < 1e-3).all() & (lowest >= 0)
    else:
        rows_sum_to_one = torch.zeros((), dtype=torch.bool, device=scores.device)
    at_floor = (scores == 0).float().mean() * (lowest >= 0)
    # NaN (not judged) for a constant output or probability rows; decided on the device, read at the columns.
    meaningless = (lowest == highest) | rows_sum_to_one
    return torch.where(meaningless, torch.full_like(at_floor, math.nan), at_floor)


def broadcast_factor(prediction: torch.Tensor, target) -> float:
    """How many times more elements an elementwise loss compares than the larger of its two arguments holds.

    1 for equal shapes (or a target that is no tensor); above 1 where the shapes broadcast to a larger one: an
    output of (B, 1) against targets of (B,) compares B x B pairs. NaN where the shapes do not broadcast.
    """
    if not torch.is_tensor(target) or target.shape == prediction.shape:
        return 1.0
    try:
        shape = torch.broadcast_shapes(prediction.shape, target.shape)
    except RuntimeError:
        return math.nan
    larger = max(prediction.numel(), target.numel(), 1)
    return math.prod(shape) / larger


class LossInputs(Collector):
    """On census steps: the loss's own prediction and target, and the facts about them (module docstring)."""

    COLUMNS = (
        Column(
            "loss_read",
            STR,
            "the torch.nn.functional loss the training loss was computed from, read from its graph on census steps"
            " (cross_entropy, nll, mse, ...; empty where none was seen)",
        ),
        Column(
            "logit_floor_share",
            F64,
            "median over census steps: share of the scores a loss that takes raw scores (cross_entropy,"
            " BCE-with-logits) received that are exactly 0 when none is below 0 (a ReLU or clamp(min=0) on the"
            " logits; 0 where any score is negative; NaN for probability rows, a constant output or"
            " another loss)",
            per_budget=True,
        ),
        Column(
            "nll_input_positive_share",
            F64,
            "median over census steps: share of the values nll_loss received above 0 (log-probabilities never are;"
            " NaN for another loss)",
            per_budget=True,
        ),
        Column(
            "likelihood_loss_min",
            F64,
            "the smallest value a negative log-likelihood loss (cross_entropy, nll, binary cross-entropy) returned"
            " on census steps (below 0 is impossible on inputs in its domain; NaN for other losses)",
            per_budget=True,
        ),
        Column(
            "loss_broadcast_factor",
            F64,
            "largest over census steps: elements an elementwise loss compared over the larger of its prediction's"
            " and target's (1: same shapes; B where (B, 1) meets (B,); NaN for other losses)",
            per_budget=True,
        ),
        Column(
            "loss_shapes",
            STR,
            "the prediction's and the target's shapes as the loss received them on the last census step read, e.g."
            " `(64, 10) vs (64,)`",
        ),
    )

    CENSUS_ONLY = True  # active over census steps only

    def __init__(self, loop: Loop):
        self.loop = loop
        self.mode = LossCalls(ignore=lambda: loop.own_forward)
        self._entered_on: int | None = None  # the thread that entered the mode (None: not entered)
        self.kind = ""
        self.shapes = ""
        self.last_call: LossCall | None = None  # the last call read (the doctor reads the task from the first)
        self._floor: list[torch.Tensor] = []
        self._nll_positive: list[torch.Tensor] = []
        self._likelihood: list[torch.Tensor] = []
        self._broadcast: list[float] = []

    def see(self, inputs, targets) -> None:
        self.leave()  # a step whose backward this thread never reported (an exception, another thread's callback)
        if self.loop.census_next:
            self.mode.calls.clear()
            self.mode.__enter__()
            self._entered_on = threading.get_ident()

    def after_backward(self, loss) -> None:
        if not self.leave() or not self.loop.census_now:
            return
        call = computed_from(loss, self.mode.calls)
        self.mode.calls.clear()
        if call is not None:
            with torch.no_grad():
                self._read(call)

    def leave(self) -> bool:
        """Exit the mode where this thread entered it; whether it was entered (on any thread).

        Called at the step's backward, and by the observer where a step ends otherwise (a loop that breaks or
        raises, a batch refused), so that no mode outlives the step it was entered for. Where the call comes from
        another context than the one that entered it (another thread, or autograd's end-of-backward callback,
        which the Hugging Face callback reports the backward from and which runs with a stack of its own), the
        mode stays entered and is left at the next batch, the end of the watch or `close()`.
        """
        entered = self._entered_on is not None
        if entered and self._entered_on == threading.get_ident():
            try:
                self.mode.__exit__(None, None, None)
            except RuntimeError:  # not on this context's stack: left where it was entered, later
                return entered
            self._entered_on = None
        return entered

    def _read(self, call: LossCall) -> None:
        self.kind, self.last_call = call.kind, call
        target_shape = tuple(call.target.shape) if call.target is not None else "no tensor"
        self.shapes = f"{tuple(call.prediction.shape)} vs {target_shape}"
        if call.kind in SCORE_LOSSES:
            share = floor_share(call.prediction)
            if share is not None:
                self._floor.append(share)
        if call.kind == "nll" and call.prediction.is_floating_point():
            self._nll_positive.append((call.prediction.float() > 1e-6).float().mean())
        if call.kind in LIKELIHOOD_LOSSES and call.result is not None and call.result.dim() == 0:
            self._likelihood.append(call.result.float())
        if call.kind in ELEMENTWISE_LOSSES:
            self._broadcast.append(broadcast_factor(call.prediction, call.target))

    def close(self) -> None:
        self.leave()

    def columns(self, final: bool) -> dict:
        scalars = {
            "logit_floor_share": _median(self._floor),
            "nll_input_positive_share": _median(self._nll_positive),
            "likelihood_loss_min": float(torch.stack(self._likelihood).min()) if self._likelihood else math.nan,
            "loss_broadcast_factor": max(self._broadcast) if self._broadcast else math.nan,
        }
        if not final:
            return scalars
        return {**scalars, "loss_read": self.kind, "loss_shapes": self.shapes}


def _median(values: list[torch.Tensor]) -> float:
    """The median of per-census readings kept on the device, NaN ones left out (one host read, here)."""
    if not values:
        return math.nan
    read = torch.stack([v.float() for v in values]).cpu()
    read = read[~torch.isnan(read)]
    return float(read.median()) if read.numel() else math.nan
