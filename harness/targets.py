"""Targets: which task a batch's targets and the model's output make, how a model is scored on it, and the loss.

The instruments and the doctor read the task from what the loop hands over, never from a label:

| task         | targets                                        | output                 | score                  |
|--------------|------------------------------------------------|------------------------|------------------------|
| `multiclass` | integer class indices, shape (B,)              | (B, C >= 2)            | accuracy (argmax)      |
| `onehot`     | float rows of 0/1 with exactly one 1, (B, C)   | (B, C)                 | accuracy (argmax)      |
| `binary`     | 0/1 values, one per example ((B,) or (B, 1))   | one unit per example   | accuracy (threshold)   |
| `multilabel` | float rows of 0/1, any number of 1s, (B, K>=2) | (B, K)                 | accuracy per label     |
| `regression` | any other real values, as many as outputs      | as many as the targets | R² (1 - SSE / SST)     |
| `sequence`   | integer class indices per position, (B, T)     | (B, T, V >= 2)         | accuracy per position  |

A binary or multi-label output is read as probabilities when every value lies in [0, 1] (a sigmoid applied),
else as logits (threshold 0). For regression the accuracy columns hold R², whose baseline (always predicting the
mean) is 0, so that "skill above the baseline" means the same for every task. `class_labels` turns the targets of
the three single-label tasks into class indices, so that the label counts, the class prior and the reference
fit work for them as for class indices.

A `sequence` task (a language model's next token, a tagger's tag per token) is multiclass at every (example,
time) position: each position is a row of V logits against one class index. Examples stay the batch's rows
(memorization and the capacity fit take whole sequences), but everything read from outputs against targets
(the score, the class counts, the loss's name) reads positions. A position whose target lies outside the
output's classes (the loss's ignore_index, -100 for padding in every collator) is left out, as for multiclass.
The loop computes the loss on the positions (`loss_fn(logits.reshape(-1, V), targets.reshape(-1))`) or on the
output as it is; `PositionLoss` calls the loop's loss the way it takes them. A causal language model that shifts
its labels itself (scores the logits at t against label t + 1) is read on its targets `shifted` one to the left.

`identify_loss` names the loss function by what it computes on one batch (so a lambda or a Keras-style
function is named as well as an `nn.Module`): what the loss assumes the output is, and whether it applies its
own softmax (then probabilities handed to it are a double softmax).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.batches import floats, scaled
from harness.eval_mode import eval_mode

TASKS = ("multiclass", "onehot", "binary", "multilabel", "regression", "sequence")
CLASS_TASKS = ("multiclass", "onehot", "binary")  # one class per example: class indices exist
INDEX_TASKS = ("multiclass", "sequence")  # targets that are class indices into the output's last dimension
LOSSES = ("cross_entropy", "nll", "bce_logits", "bce", "mse", "l1", "other")
REGRESSION_LOSSES = ("mse", "l1")
SOFTMAX_LOSSES = ("cross_entropy",)  # losses that apply a softmax of their own to the output
BINARY_LOSSES = ("bce_logits", "bce")  # binary cross-entropy, on logits or on probabilities


class TaskError(ValueError):
    """The targets and the output make no task the doctor covers; the message says why in one line."""


def _is_zero_one(y: torch.Tensor) -> bool:
    return bool(((y == 0) | (y == 1)).all())


def task_of(targets: torch.Tensor, outputs: torch.Tensor) -> str:
    """The task of one batch (see the module docstring), or TaskError if targets and output do not match."""
    if not (torch.is_tensor(targets) and torch.is_tensor(outputs)):
        raise TaskError(f"the targets and the model's output must be tensors, not {type(outputs).__name__}")
    n = len(targets)
    if outputs.dim() == 0 or len(outputs) != n:
        raise TaskError(f"model output {tuple(outputs.shape)} for {n} targets: one output row per example expected")
    per_example = outputs[0].numel()
    if not targets.is_floating_point() and targets.dim() == 1 and outputs.dim() == 2 and outputs.shape[1] >= 2:
        return "multiclass"
    if _is_sequence(targets, outputs):
        return "sequence"
    y = targets.float()
    if targets.numel() == outputs.numel() and _is_zero_one(y):
        if per_example == 1:
            return "binary"
        if targets.dim() == 2 and outputs.dim() == 2:
            return "onehot" if bool((y.sum(dim=1) == 1).all()) else "multilabel"
    if targets.is_floating_point() and targets.numel() == outputs.numel():
        return "regression"
    if not targets.is_floating_point() and targets.numel() == outputs.numel() and per_example == 1:
        return "regression"  # integer counts or scores predicted by one output
    raise TaskError(
        f"targets {tuple(targets.shape)} ({targets.dtype}) and model output {tuple(outputs.shape)} make no task the"
        " doctor covers: class indices with (batch, C) outputs, class indices per position (batch, time) with"
        " (batch, time, V) outputs, or targets of the output's shape (one-hot, binary, multi-label, regression)"
    )


def _is_sequence(targets: torch.Tensor, outputs: torch.Tensor) -> bool:
    """Class indices per position, (B, T), against (B, T, V >= 2) outputs: a class index for each position's row."""
    return (
        not targets.is_floating_point()
        and targets.dim() == 2
        and outputs.dim() == 3
        and outputs.shape[:2] == targets.shape
        and outputs.shape[2] >= 2
    )


def positions(outputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A sequence batch as multiclass rows: the (B * T, V) outputs and (B * T,) class indices of its positions."""
    return outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1)


def shifted(targets: torch.Tensor, shift: int, fill: int) -> torch.Tensor:
    """(B, T) targets moved `shift` positions to the left, the last `shift` positions set to `fill`.

    The targets a causal language model's output answers when it is handed its inputs as labels and shifts them
    itself (Hugging Face's convention: the logits at position t are scored against label t + 1): paired with the
    output as it is, position by position. `fill` is a label the loss ignores (its ignore_index), so the last
    positions, which answer nothing, are left out of every measurement as padding is.
    """
    moved = targets.new_full(targets.shape, fill)
    moved[:, : targets.shape[1] - shift] = targets[:, shift:]
    return moved


class PositionLoss:
    """The loop's loss of sequence outputs, called the way the loop calls it: on the positions, or on the output.

    A loop computes the loss of (B, T, V) logits either on their positions, `loss_fn(logits.reshape(-1, V),
    targets.reshape(-1))` (nn.CrossEntropyLoss takes nothing else), or on the output as it is (a function that
    reshapes or transposes it itself). `of` tries the positions first on one batch, and takes the output as it is
    only where the loss cannot be called on positions. Called on (B, T, V) outputs and (B, T) targets, it computes
    the loss as the loop does; called on rows of positions, (n, V) and (n,), it computes the same loss of those
    positions, so the doctor's own checks (the loss's name, whether it ignores a label) read rows as for multiclass.
    """

    def __init__(self, loss_fn, on_positions: bool):
        self.loss_fn, self.on_positions = loss_fn, on_positions

    @classmethod
    def of(cls, loss_fn, outputs: torch.Tensor, targets: torch.Tensor) -> "PositionLoss":
        """The loss as the loop calls it, read from one sequence batch (positions it would ignore left out)."""
        rows, labels = positions(outputs.detach(), targets)
        kept = in_classes(labels, rows.shape[1])
        rows, labels = (rows[kept][:2], labels[kept][:2]) if bool(kept.any()) else (rows[:1], labels[:1])
        try:
            with torch.no_grad():
                loss_fn(rows, labels)
        except Exception:  # noqa: BLE001 - a loss that cannot take positions takes the output as it is
            return cls(loss_fn, on_positions=False)
        return cls(loss_fn, on_positions=True)

    @property
    def ignore_index(self) -> int | None:
        """The loop's loss's own ignore_index, where it has one (nn.CrossEntropyLoss)."""
        return getattr(self.loss_fn, "ignore_index", None)

    def __call__(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if _is_sequence(targets, outputs):
            return self.loss_fn(*positions(outputs, targets)) if self.on_positions else self.loss_fn(outputs, targets)
        if self.on_positions:  # rows of positions already
            return self.loss_fn(outputs, targets)
        return self.loss_fn(outputs.unsqueeze(1), targets.unsqueeze(1))  # each row a sequence of one position


@dataclass(frozen=True)
class Task:
    """What one batch's targets and the model's output make: the task, its size, and an uninformed guess's loss.

    The uninformed guess ignores the inputs: its loss is ln C for classes, ln 2 per binary target, the targets'
    variance for regression (NaN from a single target).
    """

    kind: str  # one of TASKS
    n_classes: int  # classes for the class tasks, labels for multi-label, output values per example for regression
    uninformed_loss: float


def read_task(targets: torch.Tensor, outputs: torch.Tensor) -> Task:
    """The task of one batch's targets and output (TaskError if they make none): read once, at a run's first batch."""
    kind = task_of(targets, outputs)
    if kind in ("multiclass", "onehot", "sequence"):
        return Task(kind, int(outputs.shape[-1]), math.log(outputs.shape[-1]))
    if kind in ("binary", "multilabel"):
        return Task(kind, 2 if kind == "binary" else int(outputs[0].numel()), math.log(2))
    spread = float(targets.detach().double().var()) if targets.numel() > 1 else math.nan
    return Task(kind, int(outputs[0].numel()), spread)


def class_labels(targets: torch.Tensor, task: str | None) -> torch.Tensor | None:
    """The class index of each example (single-label tasks) or position (sequence, flattened); else None.

    None for multi-label and regression, which have no class indices.
    """
    if task in INDEX_TASKS:
        return targets.reshape(-1).long()
    if task == "onehot":
        return targets.argmax(dim=1)
    if task == "binary":
        return targets.reshape(-1).round().long()
    return None


def in_classes(labels: torch.Tensor, n_classes: int | None = None) -> torch.Tensor:
    """Per class index: whether it names one of the `n_classes` classes (any class >= 0 when None).

    Labels outside [0, C) are the ones a loss ignores (its ignore_index: -100 by default, -1 or 255 as padding):
    the doctor refuses them at the first batch unless the loss ignores them (doctor/task_reading.py), and every count
    and score here leaves them out rather than crashing on them or counting them as a class.
    """
    valid = labels >= 0
    return valid & (labels < n_classes) if n_classes is not None else valid


def _decisions(outputs: torch.Tensor) -> torch.Tensor:
    """0/1 decisions of binary or multi-label outputs: probabilities at 0.5, logits at 0."""
    cut = 0.5 if bool(((outputs >= 0) & (outputs <= 1)).all()) else 0.0
    return (outputs > cut).float()


class Scorer:
    """Accumulates the score of a model over batches of one task (see the module docstring)."""

    def __init__(self, task: str):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: choose {', '.join(TASKS)}")
        self.task = task
        self.hits = self.count = 0.0
        self.sse = self.sum = self.sum_sq = 0.0

    def add(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        outputs = outputs.detach().float()
        if self.task == "multiclass":
            self._add_indices(outputs, targets)
        elif self.task == "sequence":  # each position is a multiclass row
            self._add_indices(*positions(outputs, targets))
        elif self.task == "onehot":
            self.hits += float((outputs.argmax(dim=1) == targets.argmax(dim=1)).sum())
            self.count += len(targets)
        elif self.task in ("binary", "multilabel"):
            y = targets.float().reshape(outputs.shape)
            self.hits += float((_decisions(outputs) == y).sum())
            self.count += y.numel()
        else:
            y = targets.float().reshape(outputs.shape).double()
            self.sse += float((outputs.double() - y).pow(2).sum())
            self.sum += float(y.sum())
            self.sum_sq += float(y.pow(2).sum())
            self.count += y.numel()

    def _add_indices(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        """Accuracy of (n, C) rows against class indices; labels the loss ignores (outside the classes) left out."""
        valid = in_classes(targets, outputs.shape[1])
        hits, count = torch.stack([((outputs.argmax(dim=1) == targets) & valid).sum(), valid.sum()]).tolist()
        self.hits += hits
        self.count += count

    def value(self) -> float:
        if not self.count:
            return math.nan
        if self.task != "regression":
            return self.hits / self.count
        total = self.sum_sq - self.sum**2 / self.count
        return 1.0 - self.sse / total if total > 0 else math.nan


def _keras_bce(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    clipped = probabilities.clamp(1e-7, 1 - 1e-7)  # Keras clips probabilities before the log
    return -(targets * clipped.log() + (1 - targets) * (1 - clipped).log()).mean()


def identify_loss(loss_fn, outputs: torch.Tensor, targets: torch.Tensor) -> str:
    """What `loss_fn` computes on this batch, named from LOSSES by comparing its value with each candidate's.

    Candidates are tried on the output as it is; "other" when none matches (label smoothing, a weighted or
    regularized loss, a loss of several terms) or the loss cannot be called on the output. A match is tried again
    on the output with each value shrunk by its own factor in [0.5, 1): a fresh model's outputs are often nearly
    the same for every class, and there any loss of a uniform guess gives about ln C (cross-entropy on logits and
    Keras's categorical cross-entropy on sigmoid outputs alike); a loss that is the candidate matches it anywhere.
    """
    with torch.no_grad():
        if _is_sequence(targets, outputs):
            # Named on the positions, each a multiclass row, with the loss called as the loop calls it.
            return identify_loss(PositionLoss.of(loss_fn, outputs, targets), *positions(outputs, targets))
        if not targets.is_floating_point() and targets.dim() == 1 and outputs.dim() == 2:
            # Class labels the loss ignores (outside the output's classes) are named on the other rows only: the
            # candidates below do not ignore them, and on an accelerator an index out of range is a device assert.
            valid = in_classes(targets, outputs.shape[1])
            if not bool(valid.all()):
                if not bool(valid.any()):
                    return "other"
                outputs, targets = outputs[valid], targets[valid]
        # Shrinking keeps every value's sign and [0, 1] range, so each candidate still applies to the second output;
        # it is rounded to the output's own dtype first, so both sides see the same values.
        shrink = 0.5 + 0.5 * torch.frac(torch.arange(outputs.numel(), device=outputs.device) * 0.6180339887)
        second = (outputs.float() * shrink.reshape(outputs.shape)).to(outputs.dtype)
        try:
            values = [float(loss_fn(outputs, targets)), float(loss_fn(second, targets))]
        except Exception:  # noqa: BLE001 - a loss we cannot call on its own output is simply not named
            return "other"
        if not all(math.isfinite(v) for v in values):
            return "other"
        out, y = outputs.float(), targets
        candidates = {}
        if not y.is_floating_point() and y.dim() == 1 and out.dim() == 2:
            # NLL first: on log-probabilities cross_entropy gives the same value (log_softmax is idempotent there).
            candidates["nll"] = lambda o: F.nll_loss(o, y)
            candidates["cross_entropy"] = lambda o: F.cross_entropy(o, y)
        elif y.numel() == out.numel():
            yf = y.float().reshape(out.shape)
            if out.dim() == 2 and out.shape[1] > 1 and bool((yf >= 0).all()):
                candidates["cross_entropy"] = lambda o: F.cross_entropy(o, yf)
            candidates["mse"] = lambda o: F.mse_loss(o, yf)
            candidates["l1"] = lambda o: F.l1_loss(o, yf)
            if bool(((yf >= 0) & (yf <= 1)).all()):
                candidates["bce_logits"] = lambda o: F.binary_cross_entropy_with_logits(o, yf)
                if bool(((out >= 0) & (out <= 1)).all()):
                    candidates["bce"] = lambda o: _keras_bce(o, yf)
                    candidates["bce_torch"] = lambda o: F.binary_cross_entropy(o, yf)
        for name, candidate in candidates.items():
            try:
                expected = [float(candidate(out)), float(candidate(second.float()))]
            except (RuntimeError, ValueError):
                continue
            if all(math.isclose(v, e, rel_tol=1e-3, abs_tol=1e-6) for v, e in zip(values, expected, strict=True)):
                return "bce" if name == "bce_torch" else name
    return "other"


def output_reach(
    model, x, scales=(1.0, 10.0, 100.0, 1000.0), forward=lambda model, x: model(x), per_position: bool = False
) -> tuple[float, float, bool]:
    """The range of values the model's output can take, and whether its rows are always simplexes (sum to 1).

    Probed two ways, in eval mode without gradients (mode and weights restored): the inputs `x` scaled by
    ±`scales`, and the parameters of the model's last module that has any (the output layer) scaled by ±1000. The
    second spans the range of whatever activation follows the output layer, however saturated the hidden layers
    are (a tanh or LSTM state stays bounded under any input): a linear output reaches far beyond any target, a
    sigmoid [0, 1], a tanh [-1, 1], a ReLU [0, inf), and a softmax's rows always sum to 1. `forward` calls the
    model on `x` (several inputs: harness/batches.py); inputs without floating-point values (token ids) are not
    scaled, so there the output layer's parameters alone are. `per_position`: the output is (B, T, V), and a row
    is one position's V values (a sequence task), not one example's.
    """
    low, high, simplex = math.inf, -math.inf, True
    last = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))][-1:]
    saved = [p.detach().clone() for p in last[0].parameters(recurse=False)] if last else []

    def outputs():
        for scale in (*scales, *(-s for s in scales)) if floats(x) else (1.0,):
            yield forward(model, scaled(x, scale))
        for scale in (1000.0, -1000.0) if last else ():
            for param, value in zip(last[0].parameters(recurse=False), saved, strict=True):
                param.copy_(value * scale)
            yield forward(model, x)

    try:
        with eval_mode(model), torch.no_grad():
            for out in outputs():
                if not torch.is_tensor(out):
                    return math.nan, math.nan, False
                out = out.detach().float()
                finite = out[torch.isfinite(out)]
                if finite.numel():
                    low, high = min(low, float(finite.min())), max(high, float(finite.max()))
                rows = out.reshape(-1, out.shape[-1]) if per_position else out.reshape(len(out), -1)
                simplex = simplex and rows.shape[1] > 1 and bool(((rows.sum(dim=1) - 1).abs() < 1e-4).all())
    finally:
        with torch.no_grad():
            for param, value in zip(last[0].parameters(recurse=False) if last else [], saved, strict=True):
                param.copy_(value)
    return low, high, simplex


def unreachable_share(targets: torch.Tensor, low: float, high: float, simplex: bool) -> float:
    """Share of the targets the output can never produce (outside [low, high], or not summing to 1 under a softmax).

    Targets exactly at a bound (0 and 1 under a sigmoid) count as reachable.
    """
    if math.isnan(low) or math.isnan(high):
        return math.nan
    y = targets.detach().float().reshape(len(targets), -1)
    span = max(float(y.max() - y.min()), 1e-6)
    tolerance = 1e-3 * span
    outside = float(((y < low - tolerance) | (y > high + tolerance)).float().mean())
    rows = float(((y.sum(dim=1) - 1).abs() > 1e-3).float().mean()) if simplex and y.shape[1] > 1 else 0.0
    return max(outside, rows)


def output_spread(outputs: torch.Tensor) -> float:
    """How much the output varies across examples: its standard deviation over the batch, per output, over its RMS.

    0 exactly when every example gets the same output (a softmax over one unit is always 1; a dead ReLU on the
    output is always 0), whatever the input.
    """
    out = outputs.detach().double().reshape(len(outputs), -1)
    if len(out) < 2 or not bool(torch.isfinite(out).all()):
        return math.nan
    spread = float(out.std(dim=0).mean())
    rms = float(out.pow(2).mean().sqrt())
    if spread == 0.0:
        return 0.0
    return spread / rms if rms > 0 else math.nan
