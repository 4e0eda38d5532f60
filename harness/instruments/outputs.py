"""Outputs: what the model hands the loss, read on census steps, and what its output can do on the probe batch.

The first training forward shows the task (class indices, one-hot rows, multi-label, regression: harness/
targets.py) and what the loss computes; both go to `Loop` for the other collectors. On each census step's
training forward: the share of output rows that are already probabilities (a softmax before a loss that applies
its own: a double softmax), and the share of examples whose label the model confidently contradicts (wrong
labels a model that has learned the rule refuses to fit). As the run stops, on the probe batch in eval mode:
how much the output varies across examples (0 for a constant output), which targets it can reach at all (a
sigmoid cannot reach -1), and how far apart the logits a softmax loss exponentiates can get.
"""

import math

import torch

from harness.batches import BatchError
from harness.column import F64, STR, Column
from harness.eval_mode import eval_mode
from harness.instruments.loop import Collector, Loop
from harness.instruments.probe import Probe
from harness.instruments.signals import finite_median, last_module, leaves_run
from harness.targets import (
    SOFTMAX_LOSSES,
    TaskError,
    class_labels,
    identify_loss,
    in_classes,
    output_reach,
    output_spread,
    positions,
    task_of,
    unreachable_share,
)

SHAPED_TASKS = ("onehot", "binary", "multilabel", "regression")  # targets shaped like the output, not class indices
# A sequence's census rows are its positions: at most this many are read (evenly spaced), so that a large
# vocabulary's softmax over every position of a long batch does not double the step's memory.
CENSUS_POSITIONS = 4096


class Outputs(Collector):
    """The task and the loss, the census steps' output readings, and the output checks on the probe."""

    COLUMNS = (
        Column(
            "task", STR, "multiclass, onehot, binary, multilabel, regression or sequence, read from targets and output"
        ),
        Column(
            "output_layer",
            STR,
            "the last module without children the model's forward ran (never a loss), `name (Type)`: where the"
            " output comes from",
        ),
        Column(
            "loss_kind",
            STR,
            "what the loss computes, named from one batch: cross_entropy, nll, bce_logits, bce, mse, l1, other",
        ),
        Column(
            "output_prob_share",
            F64,
            "median share of output rows that are probabilities, handed to a loss that applies a softmax",
            per_budget=True,
        ),
        Column(
            "output_spread",
            F64,
            "std of the output over the probe batch's examples over its RMS (0: the same for every input)",
            per_budget=True,
        ),
        Column(
            "target_reach_gap",
            F64,
            "share of the probe batch's targets the output cannot produce (NaN for class indices)",
            per_budget=True,
        ),
        Column(
            "logit_reach_span",
            F64,
            "for a loss that applies its own softmax: how far apart the outputs can get (max - min), with the inputs "
            "and the output layer scaled up to 1000x; NaN for other losses and for rows that always sum to 1",
            per_budget=True,
        ),
        Column(
            "confident_disagreement",
            F64,
            "median over the later half of the census steps: share of the batch whose label the model contradicts "
            "(another class ranked first, the label given p < 0.1)",
            per_budget=True,
        ),
        Column(
            "confident_disagreement_peak",
            F64,
            "the largest share of a census batch confidently contradicted so far",
            per_budget=True,
        ),
    )

    CENSUS_ONLY = True  # hooks the forwards of census steps

    def __init__(self, loop: Loop, probe: Probe):
        self.loop, self.probe = loop, probe
        self.output_prob: list[float] = []  # per census: share of output rows that are probabilities
        self.disagreement: list[tuple[int, float]] = []  # per census: (step, share confidently against its label)
        self._loss_read = False  # the loss is named on the first training forward (with the task, unless given)
        self.ran: list[str] = []  # the leaf modules the probe's forward ran, in order (output_layer: the last)
        # Hooked exactly while the next step is a census step: the only forwards it reads, and a hook on every
        # forward costs its call on every step of a loop whose step may take a millisecond.
        self._hook = None
        self._arm()

    def after_backward(self, loss) -> None:
        self._arm()  # the next step's turn

    def _arm(self) -> None:
        """Hook the model's output exactly while the next step is a census step: the only forwards it reads."""
        census_next = self.loop.census_next
        if census_next and self._hook is None:
            self._hook = self.loop.model.register_forward_hook(self._after_forward)
        elif not census_next and self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _after_forward(self, _model, _inputs, output) -> None:
        loop = self.loop
        if loop.own_forward or not torch.is_grad_enabled() or not loop.census_next or not loop.output_is_prediction:
            return
        output = loop.layout.output_or_none(output)  # a Hugging Face model returns an object holding the logits
        if output is None:
            return
        if not self._loss_read and loop.last_targets is not None:
            self._read_task(output, loop.last_targets)
        labels = loop.last_targets
        if loop.task == "sequence" and torch.is_tensor(output) and output.dim() == 3 and torch.is_tensor(labels):
            output, labels = positions(output, labels)  # each position is a row (harness/targets.py)
            every = -(-len(output) // CENSUS_POSITIONS)
            output, labels = output[::every], labels[::every]
        if torch.is_tensor(output) and output.dim() == 2 and output.shape[1] > 1:
            # Rows of probabilities (in [0, 1], summing to 1) handed to a loss: a softmax already applied. That is
            # a double softmax only for a loss that applies a softmax of its own (not MSE on a Keras-style output).
            out = output.detach().float()
            rows = (out.amin(dim=1) >= 0) & ((out.sum(dim=1) - 1).abs() < 1e-3)
            self.output_prob.append(float(rows.float().mean()) if loop.loss_kind in SOFTMAX_LOSSES else 0.0)
            self._disagreement(out if bool(rows.all()) else out.softmax(dim=1), labels)

    def read_loss_again(self) -> None:
        """Name the loss again at the next census forward (the doctor read the task late, from the loss's inputs)."""
        self._loss_read = False

    def _read_task(self, output, targets) -> None:
        """The loss, and the task unless it was read already, from the first training forward and its batch."""
        self._loss_read = True
        if torch.is_tensor(output) and output.dim() == 2 and not targets.is_floating_point():
            self.loop.classes = output.shape[1]  # class indices outside the output's width are not classes
        elif torch.is_tensor(output) and output.dim() == 3 and targets.dim() == 2 and not targets.is_floating_point():
            self.loop.classes = output.shape[2]  # a sequence's: a class index per position
        if self.loop.task is None:  # the grid's cells; the doctor reads it at its first batch (Instruments.task_read)
            try:
                self.loop.task = task_of(targets, output)
            except TaskError:
                self.loop.task = "unknown"
                return
        self.loop.loss_kind = identify_loss(self.loop.loss_fn, output.detach(), targets.to(output.device))

    def _disagreement(self, probabilities: torch.Tensor, targets) -> None:
        """Share of this batch's rows whose label the model contradicts: another class first, the label p < 0.1.

        A model that has learned the rule but is fed some wrong labels still ranks the true class first and gives
        the wrong label almost nothing; a model that is merely unsure spreads its probability instead. A row is an
        example, or a position of a sequence (`targets` then holds the positions' labels, flattened).
        """
        task = self.loop.task
        if task not in ("multiclass", "onehot", "sequence") or not torch.is_tensor(targets):
            return
        labels = class_labels(targets, task)
        if labels.shape[0] != probabilities.shape[0]:
            return
        if labels.device != probabilities.device:
            labels = labels.to(probabilities.device)
        # Labels the loss ignores (-1, -100, 255: outside the output's classes) are no answer to contradict.
        valid = in_classes(labels, probabilities.shape[1])
        if not bool(valid.all()):
            if not bool(valid.any()):
                return
            probabilities, labels = probabilities[valid], labels[valid]
        given = probabilities.gather(1, labels.unsqueeze(1)).squeeze(1)
        other_first = probabilities.argmax(dim=1) != labels
        self.disagreement.append((self.loop.step + 1, float((other_first & (given < 0.1)).float().mean())))

    def _output_checks(self) -> dict:
        """What the output can do now, on the probe batch: how much it varies, and which targets it can reach."""
        checks = {"output_spread": math.nan, "target_reach_gap": math.nan, "logit_reach_span": math.nan}
        if self.probe.inputs is None or not self.loop.output_is_prediction:
            return checks
        loop = self.loop
        model, task, loss_kind = loop.model, loop.task, loop.loss_kind
        probe = loop.on_model_device(self.probe.inputs)
        with loop.own_forward_pass(), eval_mode(model):
            with torch.no_grad(), leaves_run(model) as ran:
                try:
                    out = loop.layout.forward(model, probe)
                except BatchError:  # an output the doctor cannot read: the output checks stay unmeasured
                    out = None
            self.ran = ran if out is not None else []  # in order: the last one made the output
            if out is not None:
                checks["output_spread"] = output_spread(out)
            reach = None
            if out is not None and (task in SHAPED_TASKS or loss_kind in SOFTMAX_LOSSES):
                reach = output_reach(model, probe, forward=loop.layout.forward, per_position=task == "sequence")
        finite = torch.is_tensor(out) and bool(torch.isfinite(out).all())
        if reach is not None and loss_kind in SOFTMAX_LOSSES and not reach[2] and finite:
            # How far apart the values a softmax loss exponentiates can get: a linear output layer reaches any
            # logits, a sigmoid or tanh on it at most 1 or 2 apart, so no class can ever get much probability.
            # (Rows that always sum to 1 are a softmax applied already: output_prob_share reads those. A model
            # whose own outputs are not finite, its weights gone to inf or NaN, has no reach to read.)
            checks["logit_reach_span"] = reach[1] - reach[0]
        # Class indices are not output values: the reach means something only for targets shaped like the output.
        if reach is not None and task in SHAPED_TASKS:
            # What the loss compares with the targets is its own activation of the output, where it applies one:
            # cross_entropy's softmax (rows that sum to 1), binary_cross_entropy_with_logits' sigmoid.
            if loss_kind in SOFTMAX_LOSSES:
                reach = (0.0, 1.0, True)
            elif loss_kind == "bce_logits":
                reach = (0.0, 1.0, reach[2])
            checks["target_reach_gap"] = unreachable_share(self.probe.targets, *reach)
        return checks

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()

    def columns(self, final: bool) -> dict:
        step = self.loop.step
        scalars = {
            **self._output_checks(),
            "output_prob_share": finite_median(self.output_prob),
            # The later half of the run only: before it has learned anything a model disagrees with no label.
            "confident_disagreement": finite_median(d for at, d in self.disagreement if 2 * at >= step),
            # At its highest: a model that has learned the rule but not yet memorized the wrong labels.
            "confident_disagreement_peak": max((d for _, d in self.disagreement), default=math.nan),
        }
        if not final:
            return scalars
        return {
            **scalars,
            "task": self.loop.task or "unknown",
            "output_layer": last_module(self.loop.model, self.ran),
            "loss_kind": self.loop.loss_kind,
        }
