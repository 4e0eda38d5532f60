"""Instruments: the checks, taken on any training loop through hooks and timers.

They see only what every PyTorch loop has: the model, the optimizer, the batch iterator and the loss
function. They never see which fault (if any) was planted. A loop is observed with three additions:

    instruments = Instruments(model, optimizer, loss_fn)
    for x, y in instruments.watch(batches):        # times the wait for each batch
        ...
        loss.backward()
        instruments.after_backward(loss)           # loss curve; gradient census on census steps
        optimizer.step()                            # step hooks measure update-to-weight ratios
    measurements = instruments.finish()

With mixed precision, `Instruments(..., scaler=scaler)` is given the loop's `torch.amp.GradScaler`: the census
reads gradients divided by its scale (what they are once unscaled), and the scale itself is a measurement.
The optimizer's step hooks also read the loop's other standard pieces without being told of them: gradient
clipping (the gradient's norm at the step against its norm after backward), and a learning-rate schedule (the
rate in the optimizer's param group at each step, against the rate it was built with).

`snapshot()` gives the scalar measurements at any point of the loop (the grid takes one at each step budget,
as if the run had stopped there). `kept_examples()` returns the first training examples the loop was fed,
for the reference fit (harness/reference.py).

`memorize` is the one check that needs a fresh model: it trains new models from the run's own model
factory on a handful of the run's examples, at fixed sensible rates.
"""

import itertools
import math
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from statistics import median

import numpy as np
import torch
from torch import nn

from harness.batches import (
    BatchError,
    BatchLayout,
    flat_rows,
    head,
    input_rms,
    join,
    rows,
    same_shape,
    tensors,
    to_device,
)
from harness.targets import (
    SOFTMAX_LOSSES,
    TaskError,
    class_labels,
    identify_loss,
    output_reach,
    output_spread,
    task_of,
    unreachable_share,
)


def _entropy(counts: torch.Tensor) -> torch.Tensor:
    """The entropy (nats) of each row of counts."""
    p = counts / counts.sum(dim=1, keepdim=True).clamp(min=1)
    return -(p * p.clamp(min=1e-300).log()).sum(dim=1)


def _median(values: Iterable[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return median(finite) if finite else math.nan


SHAPED_TASKS = ("onehot", "binary", "multilabel", "regression")  # targets shaped like the output, not class indices
PROBE_EXAMPLES = 16  # the probe batch: the first batch, grown from the next ones when it is smaller (the grid's
# smallest batch is 16, so its cells are probed on their first batch)
SATURATING = {nn.Tanh: (-1.0, 1.0), nn.Sigmoid: (0.0, 1.0)}  # output bounds of saturating activations
MODE_DEPENDENT = (nn.Dropout, nn.modules.batchnorm._BatchNorm)  # layers that act differently in eval mode
BATCH_DRAWS = 256  # random batches the label mix is compared with
CLIPPED = 1 - 1e-4  # a step whose gradient norm fell below this share of its norm after backward was clipped


def _scalars(values: list[torch.Tensor]) -> list[float]:
    """0-d tensors as Python floats, read in one go (stacked in the widest of their dtypes, which holds them all)."""
    try:
        return torch.stack(values).tolist()
    except RuntimeError:  # on several devices
        return [float(v) for v in values]


def _unhook(param: torch.Tensor, hook) -> None:
    """Remove a tensor hook, and with the last one the tensor's hook table.

    Autograd calls into Python for a table left empty too, at the cost of a hook (about 3% of a small model's step).
    """
    hook.remove()
    if not param._backward_hooks:
        param._backward_hooks = None


def _zero_counts(tensors: list[torch.Tensor]) -> list[int]:
    """How many entries of each tensor are exactly 0, in one call where the count stays exact (float32 or wider)."""
    exact = [t.numel() < 1 << 24 and t.dtype in (torch.float32, torch.float64) for t in tensors]
    nonzero = iter(
        _scalars(torch._foreach_norm([t for t, e in zip(tensors, exact, strict=True) if e], 0)) if any(exact) else []
    )
    return [t.numel() - round(next(nonzero)) if e else int((t == 0).sum()) for t, e in zip(tensors, exact, strict=True)]


def plain_forward(model: nn.Module, x):
    """The model on one input tensor: how the grid's loop and a pair batch call it."""
    return model(x)


def activation_census(model: nn.Module, x, forward: Callable = plain_forward) -> dict:
    """What the activation modules (ReLU, Tanh, Sigmoid) do on the probe batch `x` (the model called by `forward`).

    Returns `dead` (share of ReLU units never positive; a unit is one feature of a (N, F) output or one
    channel of a (N, C, ...) output), `dead_layers` (that share per ReLU module), `saturated` (share of Tanh
    and Sigmoid outputs within 1% of their bounds, where the derivative is nearly 0) and `growth` (RMS of
    the last activation module's output over the first one's: far above 1 when the signal grows layer after
    layer). The probe runs in eval mode without gradients, so it changes no BatchNorm statistics;
    functional calls (F.relu) are not seen, and a measure with no module to read is NaN.
    """
    activity: list[torch.Tensor] = []
    saturated = [0, 0]
    rms: list[float] = []

    def record(module, _inputs, output):
        if output.dim() < 2:
            return
        output = output.detach()
        rms.append(float(output.float().pow(2).mean().sqrt()))
        if isinstance(module, nn.ReLU):
            activity.append(output.transpose(0, 1).reshape(output.shape[1], -1).gt(0).any(dim=1))
        else:
            low, high = SATURATING[type(module)]
            margin = 0.01 * (high - low)
            saturated[0] += int(((output < low + margin) | (output > high - margin)).sum())
            saturated[1] += output.numel()

    kinds = (nn.ReLU, *SATURATING)
    handles = [m.register_forward_hook(record) for m in model.modules() if type(m) in kinds]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            forward(model, x)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    dead = sum(int((~active).sum()) for active in activity)
    return {
        "dead": dead / sum(active.numel() for active in activity) if activity else math.nan,
        "dead_layers": [1.0 - active.float().mean().item() for active in activity],
        "saturated": saturated[0] / saturated[1] if saturated[1] else math.nan,
        "growth": rms[-1] / rms[0] if len(rms) > 1 and rms[0] > 0 else math.nan,
    }


def dead_units(model: nn.Module, x: torch.Tensor) -> tuple[float, list[float]]:
    """Share of ReLU units never positive on the probe batch `x`, overall and per ReLU module."""
    census = activation_census(model, x)
    return census["dead"], census["dead_layers"]


def spikes(
    losses: list[float], window: int = 20, spread: float = 8.0, found: list[int] | None = None, start: int = 0
) -> list[int]:
    """Steps whose loss jumps far out of the range of the `window` steps before it.

    A spike is a loss above the recent median by `spread` times the recent median absolute deviation (so a
    loss that is noisy anyway needs a bigger jump) and above 1.3 times that median. A loss that has plateaued
    (a rate too low, a softmax before the loss) still shows its spikes; a run of consecutive spikes counts once,
    at its first step. Whether a step spiked depends only on the losses up to it, so `found` (the spikes of the
    first `start` losses) lets a longer run's spikes extend a shorter prefix's instead of recomputing them.
    """
    found = list(found or [])
    if not losses or not math.isfinite(losses[0]):
        return found
    floor = 1e-3 * abs(losses[0])  # a perfectly flat stretch would otherwise make any wiggle a spike
    for step in range(max(window, start), len(losses)):
        recent = losses[step - window : step]
        middle = median(recent)
        deviation = max(median(abs(v - middle) for v in recent), floor)
        jumped = losses[step] > middle + spread * deviation and losses[step] > 1.3 * middle
        if jumped and (not found or found[-1] != step - 1):
            found.append(step)
    return found


def periodicity(steps: list[int]) -> tuple[float, int]:
    """The most common gap between consecutive spikes, and how many gaps have it (0 with fewer than 2)."""
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    if not gaps:
        return math.nan, 0
    period = max(sorted(set(gaps)), key=gaps.count)
    return float(period), gaps.count(period)


def example_rows(inputs, targets, limit: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first `limit` examples of a batch as (inputs flattened to float rows, targets as given), on the CPU.

    None unless the inputs are floating point (several inputs are laid side by side) with one target row per
    example; `class_labels` (harness/targets.py) turns the targets into class indices where the task has them.
    """
    if not (torch.is_tensor(targets) and targets.dim() >= 1) or rows(inputs) != len(targets):
        return None
    x = flat_rows(inputs, limit)
    return (x, targets[: len(x)].detach().cpu()) if x is not None else None


class Instruments:
    """Observes one training loop. Create it before the loop, call `finish()` after it."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable,
        census_every: int = 50,
        keep_examples: int = 1024,
        scaler: "torch.amp.GradScaler | None" = None,
        layout: BatchLayout | None = None,
        fresh_gradient: bool = True,
    ):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.layout = layout if layout is not None else BatchLayout(model)  # where each batch keeps inputs, targets
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.census_every = census_every
        # Each census recomputes a fresh gradient of the last batch to compare .grad with (accumulation_ratio): a
        # forward and backward pass of its own. Only the naive rules read it (no_zero_grad is read from hooks), so
        # the doctor, which must cost its user little, goes without.
        self.fresh_gradient = fresh_gradient
        self.keep_examples = keep_examples
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # the first training examples, on the CPU
        self.n_kept = 0
        self.named_params = list(model.named_parameters())
        self.step = -1  # index of the step whose backward was seen last
        self.losses: list[torch.Tensor] = []  # detached, so the loop never waits on a device sync
        self.first_loss = math.nan
        self.wait_s = 0.0
        self.loop_start: float | None = None
        self.last_inputs = None  # the last batch's inputs (a tensor, or a tuple or dict of them) and targets
        self.last_targets: torch.Tensor | None = None
        self.last_rng: tuple | None = None
        self.probe = None  # the first batch's inputs, as the layout takes them from the batch
        self._probe_growing = True  # until the probe holds PROBE_EXAMPLES examples (or a batch of another shape)
        self.probe_targets: torch.Tensor | None = None
        self.task: str | None = None  # read from the first training forward (harness/targets.py)
        self.loss_kind = "other"  # what the loss computes, named on the first training forward
        self.input_rms = math.nan
        self.label_counts: torch.Tensor | None = None
        self.label_positives: torch.Tensor | None = None  # multi-label: how often each label is 1
        self.label_rows = 0
        self._pending_labels: list[torch.Tensor] = []  # counted in bulk: a bincount per step costs more than it says
        self._pending_values = 0
        self.batch_entropies: list[float] = []  # per batch with class labels: the entropy of its labels (nats)
        self.batch_sizes: list[int] = []
        self._spikes_found: list[int] = []  # the spikes of the first `_spikes_upto` losses, measured already
        self._spikes_upto = 0
        self.init_census: dict = {}
        self._init_state: dict | None = None  # the weights at the first step, while a small probe grows
        self.output_prob: list[float] = []  # per census: share of output rows that are probabilities
        self.disagreement: list[tuple[int, float]] = []  # per census: (step, share confidently against its label)
        self.has_modes = any(isinstance(m, MODE_DEPENDENT) for m in model.modules())
        self.forwards = {"train": 0, "train_in_eval": 0, "eval": 0, "eval_in_train": 0}
        self._own_forward = False  # the instruments' own forward passes are not the loop's
        self.censuses: list[dict] = []
        self.update_ratios: list[list[float]] = []
        self.validation: list[tuple[int, float, float]] = []
        self._weights_before: list[torch.Tensor] | None = None
        self._ratio_due = False  # a census asked for the update ratio of the next optimizer step
        # The loop's shape, from hooks: backward passes per optimizer step, and whether .grad still held
        # gradients from before the last optimizer step when the next backward began (never cleared).
        self.optimizer_steps = 0
        self.backwards_per_step: list[int] = []
        self._backwards_since_step = 0
        self._clear_check_due = False  # the first backward after an optimizer step looks at .grad once
        self.carried_steps = 0  # optimizer steps whose first backward found .grad not cleared
        self.checked_steps = 0
        # Clipping: after each census, the gradient's norm after the last backward before the optimizer step
        # (unscaled) and at the step itself (after whatever unscale_ and clip_grad_norm_ the loop did).
        self.kept_at_step: list[float] = []  # per measured optimizer step: norm at the step over norm after backward
        self._norm_after_backward = math.nan
        self._clip_due = False
        # The rate: the optimizer's own (its param group's "initial_lr" when a scheduler set one), and at each step.
        self.lr_built = math.nan
        self.lr_peak = math.nan
        self.lr_last = math.nan
        # Mixed precision: the GradScaler's scale at each census, and the steps it skipped (its scale halves at each).
        self.scales: list[float] = []
        self.skipped_steps = 0
        self._scale_read_at = -1  # the step of the last read
        # Hooks cost their call on every step of a loop whose step may take a millisecond, so only what is read is
        # hooked: the train/eval mode only where it changes something, the output only while the next step is a
        # census step (_arm_output_check), and the gradients on one parameter once the first backward has shown
        # which one's arrives first (_on_gradient).
        self._hooks = [
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
        ]
        if self.has_modes:
            self._hooks.append(model.register_forward_pre_hook(self._before_forward))
        self._output_hook = None
        self._census_next = True  # whether the next step (the first: step 0) is a census step
        self._arm_output_check()
        self._gradient_hooks: list = []
        self._watched: torch.Tensor | None = None  # the parameter whose .grad is read (_hook_every_gradient)
        self._exact = False  # read by the hook on every step (_read_cleared)
        self._grad_at_step: tuple | None = None  # (weakref to .grad, its version) as the last optimizer step left it
        self._hook_every_gradient()

    def is_census_step(self, step: int) -> bool:
        """Every `census_every` steps, and at steps 0, 1, 2, 4, 8, ... below it: a short run gets several."""
        return step % self.census_every == 0 or (step < self.census_every and step & (step - 1) == 0)

    # ----- data wait ---------------------------------------------------------------------------------------
    def watch(self, batches: Iterable, then: Callable[[], None] | None = None) -> Iterator:
        """Yield the batches of `batches`, timing how long the loop waits for each one; `then()` after each is seen."""
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            if self.loop_start is None:
                self.loop_start = start
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.see(batch, time.perf_counter() - start)
            if then is not None:
                then()
            yield batch

    def see(self, batch, waited_s: float = 0.0) -> None:
        """One batch the loop is about to train on, and how long it waited for it.

        `watch` calls it for each batch it yields; a loop the instruments do not iterate (a framework's callbacks)
        calls it itself, before the batch's forward pass.
        """
        if self.loop_start is None:
            self.loop_start = time.perf_counter() - waited_s
        self.wait_s += waited_s
        inputs, targets = self.layout.split(batch)
        self.last_inputs, self.last_targets = inputs, targets
        if self.probe is None:
            self.probe, self.probe_targets = inputs, targets
            self.input_rms = input_rms(inputs)
            self._probe_growing = rows(inputs) < PROBE_EXAMPLES
        elif self._probe_growing:
            self._grow_probe(inputs, targets)
        self._count_labels(targets)
        if self.n_kept < self.keep_examples:
            self._keep(inputs, targets)
        if self.fresh_gradient and self._census_next:
            # Remember the RNG state the forward pass will start from, so that the census can replay
            # the same dropout masks when it recomputes a fresh gradient.
            cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
            self.last_rng = (torch.get_rng_state(), cuda)

    def _grow_probe(self, x, y) -> None:
        """Small batches: the probe grows from the next batches to PROBE_EXAMPLES examples (of the same shape).

        A unit "never active" on one example means nothing; the census at initialization waits for the probe,
        on the weights as they were at the first step.
        """
        if not same_shape(x, self.probe) or rows(x) != len(y):
            return
        if y.shape[1:] != self.probe_targets.shape[1:] or y.dtype != self.probe_targets.dtype:
            return
        room = PROBE_EXAMPLES - rows(self.probe)
        self.probe = join([self.probe, head(x, room)])
        self.probe_targets = torch.cat([self.probe_targets, y[:room].detach()])
        self._probe_growing = rows(self.probe) < PROBE_EXAMPLES
        if not self._probe_growing and self._init_state is not None:
            self._census_at_init()

    def _weights(self) -> dict:
        """A copy of the model's state (parameters and buffers), to put back with load_state_dict."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def _census_at_init(self) -> None:
        """The activation census on the initial weights, put back for the census and then replaced by today's."""
        initial, self._init_state = self._init_state, None
        with torch.no_grad():
            now = self._weights()
            self.model.load_state_dict(initial)  # in place: the optimizer keeps its references
            try:
                self.init_census = self._activation_census()
            finally:
                self.model.load_state_dict(now)

    def _keep(self, inputs, targets) -> None:
        """Keep the first `keep_examples` examples (floating-point inputs and their targets) for the reference."""
        kept = example_rows(inputs, targets, self.keep_examples - self.n_kept)
        if kept is not None:
            self.kept.append(kept)
            self.n_kept += len(kept[1])

    def kept_examples(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The distinct training examples among the first the loop was fed, inputs flattened to rows, in order.

        A small training set comes round again every epoch: each example counts once. Targets are class indices;
        None if none was kept or the task has no classes (multi-label, regression: no reference fit).
        """
        if not self.kept:
            return None
        try:
            x, y = torch.cat([x for x, _ in self.kept]), class_labels(torch.cat([y for _, y in self.kept]), self.task)
        except (RuntimeError, ValueError):  # targets of different shapes from batch to batch
            return None
        if y is None or len(y) != len(x):
            return None
        _, first = np.unique(torch.cat([x, y.unsqueeze(1).float()], dim=1).numpy(), axis=0, return_index=True)
        order = torch.from_numpy(np.sort(first))
        return x[order], y[order]

    def _count_labels(self, labels) -> None:
        """Running count of each class among the targets the loop trains on (per label for multi-label targets)."""
        if not (torch.is_tensor(labels) and labels.dim() >= 1) or not labels.shape[0]:  # shape: len() costs more
            return
        self._pending_labels.append(labels.detach() if labels.requires_grad else labels)
        self._pending_values += labels.numel()
        # Counted in bulk, as seldom as memory allows: a flush costs about half a step whatever its size.
        if (len(self._pending_labels) >= 1024 or self._pending_values >= 1 << 18) and self.task is not None:
            self._flush_labels()

    def _flush_labels(self) -> None:
        if not self._pending_labels or self.task is None:
            return
        pending, self._pending_labels, self._pending_values = self._pending_labels, [], 0
        if self.task == "multilabel":
            rows = torch.cat([t.reshape(len(t), -1).float() for t in pending])
            positives = rows.sum(dim=0)
            self.label_positives = positives if self.label_positives is None else self.label_positives + positives
            self.label_rows += len(rows)
            return
        try:
            labels = class_labels(torch.cat(pending), self.task)
        except (RuntimeError, ValueError):
            return
        if labels is None or not len(labels) or int(labels.min()) < 0:
            return
        sizes = [len(t) for t in pending]
        if sum(sizes) == len(labels):
            self._batch_entropies(labels, sizes)
        counts = torch.bincount(labels, minlength=0 if self.label_counts is None else len(self.label_counts))
        if self.label_counts is not None and len(counts) > len(self.label_counts):
            self.label_counts = torch.nn.functional.pad(self.label_counts, (0, len(counts) - len(self.label_counts)))
        self.label_counts = counts if self.label_counts is None else self.label_counts + counts

    def _batch_entropies(self, labels: torch.Tensor, sizes: list[int]) -> None:
        """The entropy of each batch's labels, for batches laid end to end in `labels` (one bincount for all)."""
        labels = labels.cpu()
        classes = int(labels.max()) + 1
        batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        counts = torch.bincount(batch * classes + labels, minlength=len(sizes) * classes).reshape(len(sizes), classes)
        self.batch_entropies.extend(_entropy(counts.double()).tolist())
        self.batch_sizes.extend(sizes)

    def _batch_label_mix(self) -> float:
        """Mean entropy of the batches' labels over that of batches drawn at random from the labels seen.

        1 for shuffled batches, whatever the class mix (an imbalanced set has a lower entropy in both); near 0 when
        each batch holds one class, as data sorted by class and fed in order gives. NaN where a shuffled batch
        has no entropy to compare with (one class, batches of one example).
        """
        if not self.batch_entropies or self.label_counts is None or self.label_counts.sum() == 0:
            return math.nan
        size = int(median(self.batch_sizes))
        prior = self.label_counts.double() / self.label_counts.sum()
        generator = torch.Generator().manual_seed(0)  # the same yardstick for the same labels, run after run
        draws = torch.multinomial(prior, size * BATCH_DRAWS, replacement=True, generator=generator)
        draws = draws.reshape(BATCH_DRAWS, size) + len(prior) * torch.arange(BATCH_DRAWS).unsqueeze(1)
        counts = torch.bincount(draws.flatten(), minlength=BATCH_DRAWS * len(prior)).reshape(BATCH_DRAWS, len(prior))
        shuffled = float(_entropy(counts.double()).mean())
        return float(np.mean(self.batch_entropies)) / shuffled if shuffled > 1e-9 else math.nan

    # ----- forward hooks: train/eval mode and what the model outputs --------------------------------------------
    def _arm_output_check(self) -> None:
        """Hook the model's output exactly while the next step is a census step: the only forwards it reads."""
        if self._census_next and self._output_hook is None:
            self._output_hook = self.model.register_forward_hook(self._after_forward)
        elif not self._census_next and self._output_hook is not None:
            self._output_hook.remove()
            self._output_hook = None

    def _before_forward(self, model, _inputs) -> None:
        if self._own_forward or not self.has_modes:
            return  # without dropout or BatchNorm the mode changes nothing
        if torch.is_grad_enabled():  # a training forward
            self.forwards["train"] += 1
            self.forwards["train_in_eval"] += not model.training
        else:  # an evaluation forward
            self.forwards["eval"] += 1
            self.forwards["eval_in_train"] += model.training

    def _after_forward(self, _model, _inputs, output) -> None:
        if self._own_forward or not torch.is_grad_enabled() or not self._census_next:
            return
        output = self.layout.output_or_none(output)  # a Hugging Face model returns an object holding the logits
        if output is None:
            return
        if self.task is None and self.last_targets is not None:
            self._read_task(output, self.last_targets)
        if torch.is_tensor(output) and output.dim() == 2 and output.shape[1] > 1:
            # Rows of probabilities (in [0, 1], summing to 1) handed to a loss: a softmax already applied. That is
            # a double softmax only for a loss that applies a softmax of its own (not MSE on a Keras-style output).
            out = output.detach().float()
            rows = (out.amin(dim=1) >= 0) & ((out.sum(dim=1) - 1).abs() < 1e-3)
            self.output_prob.append(float(rows.float().mean()) if self.loss_kind in SOFTMAX_LOSSES else 0.0)
            self._disagreement(out if bool(rows.all()) else out.softmax(dim=1))

    def _read_task(self, output, targets) -> None:
        """The task and the loss, from the first training forward's output and its batch's targets."""
        try:
            self.task = task_of(targets, output)
        except TaskError:
            self.task = "unknown"
            return
        self.loss_kind = identify_loss(self.loss_fn, output.detach(), targets.to(output.device))

    def _disagreement(self, probabilities: torch.Tensor) -> None:
        """Share of this batch's examples whose label the model contradicts: another class first, the label p < 0.1.

        A model that has learned the rule but is fed some wrong labels still ranks the true class first and gives
        the wrong label almost nothing; a model that is merely unsure spreads its probability instead.
        """
        targets = self.last_targets
        if self.task not in ("multiclass", "onehot") or not torch.is_tensor(targets):
            return
        labels = class_labels(targets, self.task)
        if labels.shape[0] != probabilities.shape[0] or int(labels.max()) >= probabilities.shape[1]:
            return
        if labels.device != probabilities.device:
            labels = labels.to(probabilities.device)
        given = probabilities.gather(1, labels.unsqueeze(1)).squeeze(1)
        other_first = probabilities.argmax(dim=1) != labels
        self.disagreement.append((self.step + 1, float((other_first & (given < 0.1)).float().mean())))

    # ----- after backward: loss curve, first loss, gradient census ------------------------------------------
    def after_backward(self, loss: torch.Tensor) -> None:
        """Call once per step, after `loss.backward()` and before `optimizer.step()`."""
        if self._clear_check_due and not self._exact and self._watched is not None:
            self._read_cleared()  # before anything here or in the loop changes .grad in place
        self.step += 1
        self._backwards_since_step += 1
        self.losses.append(loss.detach())
        if self.step == 0:
            self.first_loss = float(self.losses[0])
            if self.probe is not None and rows(self.probe) >= PROBE_EXAMPLES:
                self.init_census = self._activation_census()
            elif self.probe is not None:  # wait for more examples; keep the weights as they are (no update yet)
                self._init_state = self._weights()
        if self._census_next:  # this step is a census step
            self._census()
            self._ratio_due = self._clip_due = True
            if self.scaler is not None:
                self._read_scale()
        if self._clip_due:  # every backward until the step: with accumulation the last one is what is stepped
            self._norm_after_backward = self._grad_norm() / self._grad_scale()
        census_next = self.is_census_step(self.step + 1)
        if census_next != self._census_next:
            self._census_next = census_next
            self._arm_output_check()

    def _activation_census(self) -> dict:
        self._own_forward = True
        try:
            return activation_census(self.model, self._on_model_device(self.probe), self.layout.forward)
        finally:
            self._own_forward = False

    def _output_checks(self) -> dict:
        """What the output can do now, on the probe batch: how much it varies, and which targets it can reach."""
        checks = {"output_spread": math.nan, "target_reach_gap": math.nan, "logit_reach_span": math.nan}
        if self.probe is None:
            return checks
        probe = self._on_model_device(self.probe)
        was_training = self.model.training
        self._own_forward = True
        try:
            self.model.eval()
            with torch.no_grad():
                try:
                    out = self.layout.forward(self.model, probe)
                except BatchError:  # an output the doctor cannot read: the output checks stay unmeasured
                    out = None
            if out is not None:
                checks["output_spread"] = output_spread(out)
            reach = None
            if out is not None and (self.task in SHAPED_TASKS or self.loss_kind in SOFTMAX_LOSSES):
                reach = output_reach(self.model, probe, forward=self.layout.forward)
            finite = torch.is_tensor(out) and bool(torch.isfinite(out).all())
            if reach is not None and self.loss_kind in SOFTMAX_LOSSES and not reach[2] and finite:
                # How far apart the values a softmax loss exponentiates can get: a linear output layer reaches any
                # logits, a sigmoid or tanh on it at most 1 or 2 apart, so no class can ever get much probability.
                # (Rows that always sum to 1 are a softmax applied already: output_prob_share reads those. A model
                # whose own outputs are not finite, its weights gone to inf or NaN, has no reach to read.)
                checks["logit_reach_span"] = reach[1] - reach[0]
            # Class indices are not output values: the reach means something only for targets shaped like the output.
            if reach is not None and self.task in SHAPED_TASKS:
                # What the loss compares with the targets is its own activation of the output, where it applies one:
                # cross_entropy's softmax (rows that sum to 1), binary_cross_entropy_with_logits' sigmoid.
                if self.loss_kind in SOFTMAX_LOSSES:
                    reach = (0.0, 1.0, True)
                elif self.loss_kind == "bce_logits":
                    reach = (0.0, 1.0, reach[2])
                checks["target_reach_gap"] = unreachable_share(self.probe_targets, *reach)
        finally:
            self.model.train(was_training)
            self._own_forward = False
        return checks

    def _on_model_device(self, inputs):
        return to_device(inputs, next(self.model.parameters()).device)

    def _grad_scale(self) -> float:
        """What `.grad` is multiplied by now: the GradScaler's scale, until the loop has called unscale_ (else 1)."""
        if self.scaler is None:
            return 1.0
        # Private, and the only way to ask: GradScaler records per optimizer whether unscale_ ran for this step
        # (OptState.UNSCALED). A loop that calls after_backward after unscale_ then reads true gradients too.
        state = self.scaler._per_optimizer_states.get(id(self.optimizer), {})
        stage = state.get("stage")
        if stage is not None and getattr(stage, "name", "") == "UNSCALED":
            return 1.0
        scale = float(self.scaler.get_scale())
        return scale if scale > 0 else math.nan  # halved to 0 (every step skipped): nothing left to read

    def _read_scale(self) -> None:
        """The scale at this census; each halving since the last one is a step the scaler skipped (non-finite)."""
        scale = float(self.scaler.get_scale())
        last = self.scales[-1] if self.scales else math.nan
        if 0 < scale < last:
            self.skipped_steps += round(math.log2(last / scale))
        elif scale == 0 < last:  # halved below float32's smallest number (2^-149) on the way
            self.skipped_steps += round(math.log2(last / 2**-149)) + 1
        elif scale == last == 0:  # at 0 nothing halves any more, and every step is skipped
            self.skipped_steps += self.step - self._scale_read_at
        self.scales.append(scale)
        self._scale_read_at = self.step

    def _grad_norm(self) -> float:
        """The norm of all of `.grad` together, as clip_grad_norm_ computes it (as stored: scaled, under AMP)."""
        grads = [p.grad for _, p in self.named_params if p.grad is not None]
        if not grads:
            return math.nan
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float()))

    def _census(self) -> None:
        scale = self._grad_scale()  # under AMP the census reads the gradients as the optimizer will get them
        grads = [param.grad for _, param in self.named_params]
        missing = [grad is None for grad in grads]
        present = [grad for grad in grads if grad is not None]
        norms, maxima, zero_shares = [], [], []
        zeros = elements = 0
        if present:
            # One call per statistic for all the parameters: the same values as one tensor at a time, for a
            # fraction of the calls (a census on a small model costs about a step).
            values = iter(_scalars([*torch._foreach_norm(present), *torch._foreach_max(torch._foreach_abs(present))]))
            norm_values = [next(values) for _ in present]
            values = iter(zip(norm_values, values, _zero_counts(present), strict=True))
        for grad in grads:
            if grad is None:
                norms.append(math.nan), maxima.append(math.nan), zero_shares.append(math.nan)
                continue
            norm, largest, n_zero = next(values)
            norms.append(norm / scale)
            maxima.append(largest / scale)
            zero_shares.append(n_zero / grad.numel())
            zeros += n_zero
            elements += grad.numel()
        total_norm = math.sqrt(sum(n * n for n in norms if not math.isnan(n)))
        # First over last weight matrix (or kernel) with a gradient: far below 1 when gradients vanish on their
        # way back to the input, as through a deep stack of sigmoids.
        matrices = [n for (_, p), n in zip(self.named_params, norms, strict=True) if p.dim() >= 2 and not math.isnan(n)]
        depth_ratio = matrices[0] / matrices[-1] if len(matrices) > 1 and matrices[-1] > 0 else math.nan
        self.censuses.append(
            {
                "step": self.step,
                "norms": norms,
                "maxima": maxima,
                "zero_shares": zero_shares,
                "missing": missing,
                "zero_share": zeros / elements if elements else math.nan,
                "total_norm": total_norm if elements else math.nan,
                "accumulation": self._accumulation_ratio() if self.fresh_gradient else math.nan,
                "depth_ratio": depth_ratio,
            }
        )

    def _accumulation_ratio(self) -> float:
        """Norm of `.grad` over the norm of a fresh gradient of the same loss on the same batch.

        1 when `.grad` holds this step's gradient only; larger when gradients pile up across steps because
        they were never zeroed. The recomputation leaves the model, its buffers and the RNG as they were.
        """
        if self.last_targets is None:
            return math.nan
        pairs = [p for _, p in self.named_params if p.requires_grad and p.grad is not None]
        if not pairs:
            return math.nan
        x, y = self._on_model_device(self.last_inputs), self._on_model_device(self.last_targets)
        buffers = [b.detach().clone() for b in self.model.buffers()]
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            if self.last_rng is not None:
                torch.set_rng_state(self.last_rng[0])
                if self.last_rng[1] is not None:
                    torch.cuda.set_rng_state_all(self.last_rng[1])
            self._own_forward = True
            try:
                loss = self.loss_fn(self.layout.forward(self.model, x), y)
                fresh = torch.autograd.grad(loss, pairs, allow_unused=True)
            finally:
                self._own_forward = False
        with torch.no_grad():
            for buffer, saved in zip(self.model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
        held = math.sqrt(sum(float(p.grad.norm()) ** 2 for p, f in zip(pairs, fresh, strict=True) if f is not None))
        held /= self._grad_scale()
        new = math.sqrt(sum(float(f.norm()) ** 2 for f in fresh if f is not None))
        return held / new if new > 0 else math.nan

    # ----- was .grad cleared since the last optimizer step? -----------------------------------------------------
    # On the first backward after an optimizer step, .grad should be None or zero: whatever it still holds was
    # added before that step, so the next step would follow it again. One parameter is read, the first whose
    # gradient arrives in the run's first backward: any one would do, since a parameter that sat out the step's
    # earlier backward passes holds nothing of them.
    #
    # A Python hook in every backward pass costs about 3% of a small model's step, so .grad is first read after
    # backward, from what the optimizer step left: a new tensor (zero_grad(set_to_none=True), the default) or
    # one zeroed in place and then added to (its version counter two or more ahead) is cleared. A tensor only
    # added to since the step (one ahead) may be one whose zeroing the counter does not see (grad.data.zero_()),
    # so from then on the hook reads it exactly, before each step's first gradient is added: only the hook ever
    # says "carried". A gradient that is a view (its counter shared with other tensors) or sparse is read by the
    # hook from the start.

    def _hook_every_gradient(self) -> None:
        """Hook every trained parameter, to learn which one's gradient arrives first (then only that one's)."""
        self._watched, self._grad_at_step = None, None
        for param, hook in self._gradient_hooks:
            _unhook(param, hook)
        self._gradient_hooks = [
            (p, p.register_hook(partial(self._on_gradient, p))) for _, p in self.named_params if p.requires_grad
        ]

    def _on_gradient(self, param: torch.Tensor, grad: torch.Tensor) -> None:
        """Runs when backward has computed `param`'s gradient, before it is added into `param.grad`."""
        if self._watched is None:  # the run's first gradient, or one after the watched parameter sat out a step
            self._watched = param
            for hooked, hook in self._gradient_hooks:
                if not (self._exact and hooked is param):
                    _unhook(hooked, hook)
            self._gradient_hooks = [pair for pair in self._gradient_hooks if self._exact and pair[0] is param]
            if not self._exact:
                return  # read after backward from now on (_read_cleared)
        if not self._clear_check_due or self._own_forward:
            return
        self._clear_check_due = False
        self.checked_steps += 1
        held = param.grad
        self.carried_steps += int(held is not None and bool(held.ne(0).any()))

    def _read_exactly(self) -> None:
        """From now on the hook reads the watched parameter's .grad before each step's first gradient is added."""
        self._exact = True
        param = self._watched
        self._gradient_hooks = [(param, param.register_hook(partial(self._on_gradient, param)))]

    def _read_cleared(self) -> None:
        """After the first backward since an optimizer step, whether the watched .grad was cleared in between."""
        grad, at_step = self._watched.grad, self._grad_at_step
        if grad is None:
            return  # no gradient reached it in this backward: look again after the next
        if grad.is_sparse or grad._base is not None:
            self._clear_check_due = False
            self._read_exactly()
            return
        if at_step is not None and at_step[0]() is grad:
            ahead = grad._version - at_step[1]
            if ahead == 0:
                return  # no gradient reached it in this backward
            if ahead == 1:  # added to and not zeroed, or zeroed where the counter does not see it: the hook tells
                self._clear_check_due = False
                self._read_exactly()
                return
        self._clear_check_due = False
        self.checked_steps += 1  # cleared: a new tensor, or zeroed in place before backward added to it

    # ----- optimizer step hooks: update-to-weight ratio, backward passes per step ----------------------------
    def _before_step(self, optimizer, args, kwargs):
        if not kwargs and len(args) == 1:  # step() as most loops call it: args[0] is the optimizer itself
            self._read_before_step(optimizer)
            return None
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            self._read_before_step(optimizer)
            return None

        # step(closure) runs the forward and backward inside the step, after this hook (LBFGS; Lightning without a
        # GradScaler, whose closure also clips): read the step after the closure, just before the update.
        def closure_then_read():
            result = closure()
            self._read_before_step(optimizer)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_read}
        return (args[0], closure_then_read, *args[2:]), kwargs

    def _read_before_step(self, optimizer) -> None:
        """The rate, the clipping and the weights as the optimizer is about to update them."""
        group = optimizer.param_groups[0]
        lr = float(group["lr"])  # as a scheduler left it for this step
        if math.isnan(self.lr_built):
            self.lr_built = float(group.get("initial_lr", lr))  # schedulers keep the rate they started from here
        if not lr <= self.lr_peak:  # also while the peak is NaN: no step read yet
            self.lr_peak = lr
        self.lr_last = lr
        if self._clip_due:
            # Called after the loop's unscale_ and clip_grad_norm_ (GradScaler.step unscales before it steps).
            at_step = self._grad_norm()
            if math.isfinite(at_step) and math.isfinite(self._norm_after_backward) and self._norm_after_backward > 0:
                self.kept_at_step.append(at_step / self._norm_after_backward)
            self._clip_due = False
        # The first optimizer step at or after a census: with gradient accumulation the census's own backward
        # pass is seldom the one an optimizer step follows.
        if self._ratio_due:
            with torch.no_grad():
                self._weights_before = torch._foreach_mul([p for _, p in self.named_params], 1.0)  # copies
            self._ratio_due = False

    def _after_step(self, _optimizer, _args, _kwargs) -> None:
        relearn = self._clear_check_due and self._watched is not None
        if relearn:
            self._hook_every_gradient()  # a whole step without the watched parameter's gradient: learn another
        self.optimizer_steps += 1
        self.backwards_per_step.append(self._backwards_since_step)
        self._backwards_since_step = 0
        # The hook reads any parameter as it learns it; read after backward, the one learned has no reading of
        # its own from this step, and is read from the next.
        self._clear_check_due = self._exact or not relearn
        if not self._exact and self._watched is not None:
            grad = self._watched.grad  # what the step followed: the next backward should find it gone or zeroed
            self._grad_at_step = None if grad is None else (weakref.ref(grad), grad._version)
        if self._weights_before is None:
            return
        with torch.no_grad():
            params = [param for _, param in self.named_params]
            moves = torch._foreach_norm(torch._foreach_sub(params, self._weights_before))
            values = _scalars([*moves, *torch._foreach_norm(self._weights_before)])
        moves, scales = values[: len(params)], values[len(params) :]
        self.update_ratios.append(
            [move / scale if scale > 0 else math.nan for move, scale in zip(moves, scales, strict=True)]
        )
        self._weights_before = None

    # ----- validation, logged by the loop --------------------------------------------------------------------
    def log_validation(self, step: int, loss: float, accuracy: float) -> None:
        self.validation.append((step, loss, accuracy))

    # ----- the measurements ------------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The scalar measurements of the loop so far, as if it stopped now; the hooks stay in place."""
        return self._measure(final=False)

    def finish(self) -> dict:
        """Remove the hooks and return every measurement, keyed by record column."""
        for hook in self._hooks:
            hook.remove()
        for param, hook in self._gradient_hooks:
            _unhook(param, hook)
        if self._output_hook is not None:
            self._output_hook.remove()
        return self._measure(final=True)

    def _measure(self, final: bool) -> dict:
        elapsed = time.perf_counter() - self.loop_start if self.loop_start is not None else math.nan
        losses = torch.stack(self.losses).double().cpu().tolist() if self.losses else []
        empty = {"dead": math.nan, "dead_layers": [], "saturated": math.nan, "growth": math.nan}
        if self._init_state is not None:  # the loop ended before the probe grew: census on what there is
            self._census_at_init()
        after = self._activation_census() if self.probe is not None else empty
        init = self.init_census or empty
        spike_steps = spikes(losses, found=self._spikes_found, start=self._spikes_upto)  # snapshots: extend, not redo
        self._spikes_found, self._spikes_upto = spike_steps, len(losses)
        period, periodic = periodicity(spike_steps)
        self._flush_labels()
        counts = self.label_counts.double() if self.label_counts is not None else None
        majority = float(counts.max() / counts.sum()) if counts is not None else math.nan
        if self.task == "multilabel" and self.label_rows:
            share = self.label_positives.double() / self.label_rows  # each label's prior: answer its majority value
            majority = float(torch.maximum(share, 1 - share).mean())
        elif self.task == "regression":
            majority = 0.0  # the R² of always predicting the mean
        outputs = self._output_checks()
        if self.scaler is not None:
            self._read_scale()  # the scale as the run stops, and the steps skipped since the last census
        forwards = self.forwards
        never = (
            [all(c["missing"][i] for c in self.censuses) for i in range(len(self.named_params))]
            if self.censuses
            else []
        )
        sizes = [p.numel() for _, p in self.named_params]
        later = [c["accumulation"] for c in self.censuses if c["step"] >= 1]
        ratios_by_param = list(zip(*self.update_ratios, strict=True)) if self.update_ratios else []
        update_ratio = [_median(r) for r in ratios_by_param]
        # Per census: the median over weight matrices that got gradients. Its peak reads the rate even when a run
        # that diverged has stopped moving by the end (dead units pass no gradient). Biases and other vectors
        # are left out: one that starts at zero (Keras's default) has no size to compare a step with, and its
        # ratio is 1/steps-so-far whatever the rate. A model with no matrices is read on all its parameters.
        matrices = [p.dim() >= 2 for _, p in self.named_params]
        if not any(matrices):
            matrices = [True] * len(matrices)
        counted = [m and not n for m, n in zip(matrices, never, strict=False)]
        curve = [_median(r for r, c in zip(ratios, counted, strict=False) if c) for ratios in self.update_ratios]
        scalars = {
            "steps": self.step + 1,
            "first_loss": self.first_loss,
            "nonfinite_losses": sum(not math.isfinite(v) for v in losses),
            "grad_zero_share_total": _median(c["zero_share"] for c in self.censuses),
            "params_without_grad": sum(never),
            "params_without_grad_share": sum(s for s, n in zip(sizes, never, strict=True) if n) / sum(sizes)
            if self.censuses and sum(sizes)
            else math.nan,
            "accumulation_ratio": _median(later),
            # Per optimizer step: median backward passes (1 in a plain loop, k when accumulating on purpose).
            "backwards_per_step": _median(self.backwards_per_step),
            "optimizer_steps": self.optimizer_steps,
            "grad_carried_share": self.carried_steps / self.checked_steps if self.checked_steps else math.nan,
            # Clipping: 1 exactly on a step nothing clipped; clip_grad_norm_ at max_norm m keeps m / norm.
            "grad_kept_at_step": _median(self.kept_at_step),
            "clipped_step_share": sum(k < CLIPPED for k in self.kept_at_step) / len(self.kept_at_step)
            if self.kept_at_step
            else math.nan,
            "lr_built": self.lr_built,
            "lr_peak_share": self.lr_peak / self.lr_built if self.lr_built > 0 else math.nan,
            "lr_last_share": self.lr_last / self.lr_built if self.lr_built > 0 else math.nan,
            "amp_scale_min": min(self.scales, default=math.nan),
            "amp_scale_last": self.scales[-1] if self.scales else math.nan,
            "amp_skipped_share": self.skipped_steps / (self.skipped_steps + self.optimizer_steps)
            if self.scaler is not None and self.skipped_steps + self.optimizer_steps
            else math.nan,
            "update_ratio_median": _median(r for r, c in zip(update_ratio, counted, strict=False) if c),
            "update_ratio_peak": max((r for r in curve if not math.isnan(r)), default=math.nan),
            "grad_depth_ratio_init": self.censuses[0]["depth_ratio"] if self.censuses else math.nan,
            "grad_depth_ratio": _median(c["depth_ratio"] for c in self.censuses),
            "dead_unit_share_init": init["dead"],
            "dead_unit_share": after["dead"],
            "saturated_share_init": init["saturated"],
            "saturated_share": after["saturated"],
            "activation_growth_init": init["growth"],
            "input_rms": self.input_rms,
            "label_imbalance": float(counts.max() / counts.min().clamp(min=1)) if counts is not None else math.nan,
            "batch_label_mix": self._batch_label_mix(),
            "majority_share": majority,
            **outputs,
            "output_prob_share": _median(self.output_prob),
            # The later half of the run only: before it has learned anything a model disagrees with no label.
            "confident_disagreement": _median(d for step, d in self.disagreement if 2 * step >= self.step),
            # At its highest: a model that has learned the rule but not yet memorized the wrong labels.
            "confident_disagreement_peak": max((d for _, d in self.disagreement), default=math.nan),
            "train_in_eval_share": forwards["train_in_eval"] / forwards["train"] if forwards["train"] else 0.0,
            "eval_in_train_share": forwards["eval_in_train"] / forwards["eval"] if forwards["eval"] else 0.0,
            "loss_spikes": len(spike_steps),
            "loss_spike_period": period,
            "periodic_spikes": periodic,
            "data_wait_s": self.wait_s,
            "loop_s": elapsed,
            "data_wait_share": self.wait_s / elapsed if elapsed > 0 else math.nan,
        }
        if not final:
            return scalars
        names = [name for name, _ in self.named_params]
        per_param = list(zip(*(c["norms"] for c in self.censuses), strict=True)) if self.censuses else []
        return {
            **scalars,
            "task": self.task or "unknown",
            "output_layer": last_module(self.model),
            "loss_kind": self.loss_kind,
            "train_loss_curve": losses,
            "val_steps": [s for s, _, _ in self.validation],
            "val_loss_curve": [v for _, v, _ in self.validation],
            "val_acc_curve": [a for _, _, a in self.validation],
            "census_steps": [c["step"] for c in self.censuses],
            "param_names": names,
            "grad_norm": [_median(v) for v in per_param],
            "grad_max": [_median(v) for v in zip(*(c["maxima"] for c in self.censuses), strict=True)],
            "grad_zero_share": [_median(v) for v in zip(*(c["zero_shares"] for c in self.censuses), strict=True)],
            "grad_missing": never,
            "grad_norm_curve": [c["total_norm"] for c in self.censuses],
            "accumulation_ratio_curve": [c["accumulation"] for c in self.censuses],
            "update_ratio": update_ratio,
            "update_ratio_curve": curve,
            "dead_unit_share_layers": after["dead_layers"],
            "loss_spike_steps": spike_steps,
        }


def last_module(model: nn.Module) -> str:
    """The model's last module without children, as `name (Type)`: where the output is produced.

    Module order is registration order, which is the order of a Sequential; an activation applied as a function
    in forward (torch.sigmoid) is not a module and is not named.
    """
    leaves = [(name, module) for name, module in model.named_modules() if not list(module.children())]
    if not leaves:
        return type(model).__name__
    name, module = leaves[-1]
    return f"{name or 'the model'} ({type(module).__name__})"


class NoInstruments(Instruments):
    """The same interface doing nothing: the bare loop of the benchmarks."""

    def __init__(self):
        pass

    def watch(self, batches: Iterable) -> Iterator:
        return iter(batches)

    def after_backward(self, loss: torch.Tensor) -> None:
        pass

    def log_validation(self, step: int, loss: float, accuracy: float) -> None:
        pass

    def finish(self) -> dict:
        return {}


def memorize(
    model_factory: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable,
    rates: Iterable[float] = (1e-4, 1e-3, 1e-2),
    steps: int = 300,
    seed: int = 0,
    check: Callable[[], None] = lambda: None,
    forward: Callable = plain_forward,
) -> dict:
    """Can a fresh model fit these few examples? Adam at each rate, full batch, `steps` steps each.

    Uses the run's model factory and examples but none of its optimizer settings, so a bad rate or a
    forgotten zero_grad in the run cannot make this fail. `check` is called every step (time limits); `forward`
    calls the model on `x` (inputs of several tensors, a model returning an object: harness/batches.py).
    Returns the final loss per rate (eval mode, on the same examples) and the best of them.
    """
    rates = [float(r) for r in rates]
    finals = []
    for rate in rates:
        with torch.random.fork_rng(devices=[]):  # the run's own RNG stream is left untouched
            torch.manual_seed(seed)
            model = model_factory().to(tensors(x)[0].device)
        optimizer = torch.optim.Adam(model.parameters(), lr=rate)
        model.train()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(forward(model, x), y).backward()
            optimizer.step()
            check()
        model.eval()
        with torch.no_grad():
            finals.append(float(loss_fn(forward(model, x), y)))
    best = min(range(len(rates)), key=lambda i: finals[i] if math.isfinite(finals[i]) else math.inf)
    return {
        "memorize_rates": rates,
        "memorize_losses": finals,
        "memorize_best_loss": finals[best] if math.isfinite(finals[best]) else math.nan,
        "memorize_best_rate": rates[best] if math.isfinite(finals[best]) else math.nan,
    }
