"""The task of a watched run, read at its first batch: `check_task`, a causal model's shift, the labels' range.

The task (harness/targets.py) is read from the first batch's targets and the model's output on an eval-mode
forward, before the loop trains on it; a class label outside the output's classes that the loss does not ignore is
refused there, not after a run of steps. A causal language model that shifts its labels itself is read so from its
own loss (`causal_shift`), and a loop that shifts them in its own loss is refused at its first step
(`ShiftInTheLoop`). The Doctor (doctor/watch.py) calls these once; the callbacks (doctor/integrations/) check a
model's own loss with `only_shifted_reproduces` too.
"""

import math
from collections.abc import Callable, Mapping

import torch
from torch import nn

from doctor.refusals import TaskFromLoss, UnsupportedTask, refusing
from harness.batches import BatchLayout, forward_signature, to_device
from harness.eval_mode import eval_mode
from harness.instruments.loop import Collector
from harness.instruments.probe import FirstLayer, first_layer_input
from harness.targets import PositionLoss, Task, TaskError, in_classes, positions, read_task, shifted


def check_task(
    model: nn.Module, layout: BatchLayout, inputs, targets: torch.Tensor, loss_fn: Callable | None = None
) -> tuple[Task, FirstLayer, Callable | None]:
    """The task of the first batch (harness/targets.py), read on an eval-mode forward before the loop trains on it.

    UnsupportedTask if the model cannot be called on the inputs as the layout reads them, its output and the
    targets make no task the doctor covers, or a class label lies outside the output's classes and `loss_fn` does
    not ignore it: refused before the first step, not after a run of steps. With the task, what the model's first
    layer was handed on that forward (harness/instruments/probe.py: the scale of inputs cast inside forward), and
    the loss as the doctor calls it on the model's output: `loss_fn`, or for a sequence a `PositionLoss` that calls
    it on the positions where the loop does (harness/targets.py).
    """
    with eval_mode(model), torch.no_grad(), refusing(), first_layer_input(model) as first:
        out = layout.forward(model, to_device(inputs, next(model.parameters()).device))
    try:
        task = read_task(targets, out)
    except TaskError as error:  # read from what the loss receives at the first step, instead
        raise TaskFromLoss(str(error), first, tuple(out.shape)) from None
    if task.kind == "multiclass":
        _check_labels(targets, out, task.n_classes, loss_fn)
    if task.kind == "sequence":
        loss_fn = PositionLoss.of(loss_fn, out, targets) if loss_fn is not None else None
        rows, labels = positions(out, targets)
        _check_labels(labels, rows, task.n_classes, loss_fn)  # each position a row, as the loss reads them
    return task, first, loss_fn


class ShiftInTheLoop(Collector):
    """The first training forward's output, held until its backward, to tell whether the loop shifts its targets.

    A loop that hands the doctor a causal model's inputs as its targets and shifts them in its own loss (the logits
    at t against token t + 1, `loss_fn(logits[:, :-1], tokens[:, 1:])`) would have every position read against
    the wrong token, and the model computes no loss of its own for `causal_shift` to read. So the loss of the
    first step is computed on its own forward's output against the targets as they are and `shifted`: where only
    the shifted ones reproduce it (within 0.1%), the run is refused in one line (UnsupportedTask) that says to
    hand the doctor the targets shifted. Read once; its hook is off after the first training forward.
    """

    def __init__(self, loop, loss_fn: Callable, fill: int):
        self.loop, self.loss_fn, self.fill = loop, loss_fn, fill
        self.output: torch.Tensor | None = None
        self._hook = loop.model.register_forward_hook(self._forward)

    def _forward(self, _model, _inputs, output) -> None:
        if self.loop.own_forward or not torch.is_grad_enabled():
            return
        logits = self.loop.layout.output_or_none(output)
        self.output = logits.detach() if torch.is_tensor(logits) and logits.dim() == 3 else None
        self.close()

    def judge(self, loss: torch.Tensor, targets: torch.Tensor | None) -> None:
        """UnsupportedTask where the first step's `loss` is the loss of the output against the shifted targets only."""
        self.close()
        output, self.output = self.output, None
        if output is None or not torch.is_tensor(targets) or output.shape[:2] != targets.shape:
            return
        seen = float(loss.detach())
        try:
            with torch.no_grad():
                in_the_loop = only_shifted_reproduces(self.loss_fn, output, targets.to(output.device), seen, self.fill)
        except Exception:  # noqa: BLE001 - a loss that cannot take them so shows nothing: nothing is said
            return
        if in_the_loop:
            raise UnsupportedTask(
                f"the loop's loss on the first step ({seen:.4g}) scores the output at each position against the next"
                " position's target, a shift made in the loop's own loss: hand the doctor the targets already"
                " shifted (inputs tokens[:, :-1], targets tokens[:, 1:]), or a model that takes the labels and"
                " computes its own loss"
            )

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def causal_shift(
    model: nn.Module, layout: BatchLayout, batch, inputs, targets: torch.Tensor, loss_fn: Callable | None, fill: int
) -> int:
    """1 where the model's own loss scores its output at each position against the next position's target, else 0.

    A causal language model handed its inputs as labels shifts them itself (Hugging Face's convention: the logits
    at t are scored against label t + 1, the last position against nothing) and returns its loss beside the
    logits. Where the batch is a dict whose targets key the model's forward takes by name, the model is called
    once more on the first batch, with those targets too (in eval mode, without gradients: the same logits its
    loss is computed from), and `loss_fn` (the loop's, or the one the targets imply) is computed on its logits
    against the targets as they are and `shifted` one position (`fill`, the loss's ignore_index, after the last).
    The shift is 1 only where the shifted targets reproduce the model's own loss (within 0.1%, as the callbacks'
    implied loss is checked) and the targets as they are do not: read from what the model computes, with nothing
    assumed of its class or config. 0 where the model computes no loss of its own, or either way is unclear.
    """
    key = layout.targets if isinstance(layout.targets, str) else None
    if isinstance(batch, Mapping) and key is None:
        key = next((k for k, value in batch.items() if value is targets), None)
    named = forward_signature(model)[2]
    if loss_fn is None or key is None or not isinstance(inputs, Mapping) or not (named is None or key in named):
        return 0
    device = next(model.parameters()).device
    try:
        with eval_mode(model), torch.no_grad():
            output = model(**to_device(inputs, device), **{key: targets.to(device)})
            own = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
            if not (torch.is_tensor(own) and own.numel() == 1 and bool(torch.isfinite(own))):
                return 0
            logits = layout.output_of(output).detach()
            labels = targets.to(logits.device)
            if not (logits.dim() == 3 and logits.shape[:2] == labels.shape):
                return 0
            loss = PositionLoss.of(loss_fn, logits, labels)
            return 1 if only_shifted_reproduces(loss, logits, labels, float(own), fill) else 0
    except Exception:  # noqa: BLE001 - a model or loss that cannot be called so shows no shift: none is read
        return 0


def only_shifted_reproduces(loss_fn: Callable, logits: torch.Tensor, labels: torch.Tensor, seen: float, fill: int):
    """Whether `seen`, a loss of `logits`, is `loss_fn` against `labels` moved one position left and not as they are.

    Within 0.1%, as the callbacks' implied loss is checked; `fill` (the loss's ignore_index) after the last position.
    """
    as_they_are, moved = (float(loss_fn(logits, y)) for y in (labels, shifted(labels, 1, fill)))
    return [math.isclose(value, seen, rel_tol=1e-3, abs_tol=1e-6) for value in (as_they_are, moved)] == [False, True]


def _check_labels(targets: torch.Tensor, out: torch.Tensor, classes: int, loss_fn: Callable | None) -> None:
    """UnsupportedTask for a class label of the first batch outside [0, classes) that the loss does not ignore.

    Read once: later batches' labels outside the classes are left out of the doctor's measurements, never a crash
    (harness/targets.py: in_classes), and a loss that does not ignore them raises in the loop's own code.
    """
    labels = targets.detach().reshape(-1)
    outside = sorted(set(labels[~in_classes(labels, classes)].tolist()))
    refused = [label for label in outside if not _ignores(loss_fn, out, labels, classes, label)]
    if refused:
        label = refused[0]
        raise UnsupportedTask(
            f"class label {label} in the first batch's targets is outside the model's {classes} classes (0 to"
            f" {classes - 1}), and the loss does not ignore it: fix the labels (or the output layer's width), or, if"
            f" {label} marks examples to leave out, give the loss ignore_index={label}, e.g."
            f" nn.CrossEntropyLoss(ignore_index={label})"
        )


def _ignores(loss_fn: Callable | None, out: torch.Tensor, labels: torch.Tensor, classes: int, label: int) -> bool:
    """Whether the loss ignores examples labelled `label`: its ignore_index, or else a try on the CPU.

    The try adds one example with that label to one well-labelled example: ignored when the loss stays the same.
    It runs on the CPU, where a class index a loss does not ignore raises (on an accelerator it is a device-side
    assert). A loop whose loss the doctor is not given (None) is left to its own loss.
    """
    if loss_fn is None:
        return True
    index = getattr(loss_fn, "ignore_index", None)
    if isinstance(index, int):
        return index == label
    inside = in_classes(labels, classes).nonzero()
    if not len(inside):
        return False  # no well-labelled example to compare with
    row = out[int(inside[0]) : int(inside[0]) + 1].detach().float().cpu()
    known = labels[int(inside[0]) : int(inside[0]) + 1].cpu()
    try:
        with torch.no_grad():
            alone = float(loss_fn(row, known))
            both = float(loss_fn(torch.cat([row, row]), torch.cat([known, known.new_tensor([label])])))
    except Exception:  # noqa: BLE001 - a loss that cannot take the label does not ignore it
        return False
    return math.isclose(alone, both, rel_tol=1e-5, abs_tol=1e-7)
