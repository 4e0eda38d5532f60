"""The doctor: the grid's instruments on a user's own training run, and the grid's rules on what they measure.

Three added lines in a user's loop:

    doctor = Doctor(model, optimizer, loss_fn, loader)   # 1: built around the loop's own pieces
    for x, y in doctor:                                 #    (was: for x, y in loader)
        ...
        loss.backward()
        doctor.after_backward(loss)                     # 2
        optimizer.step()
    print(doctor.report())                              # 3

With mixed precision the doctor is given the loop's GradScaler, and after_backward still follows backward:

    doctor = Doctor(model, optimizer, loss_fn, loader, scaler=scaler)
        ...
        scaler.scale(loss).backward()
        doctor.after_backward(loss)                     # .grad is read divided by the scale
        scaler.unscale_(optimizer)                      # clipping, if any, after this line
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

Gradient accumulation, clipping and learning-rate schedules need nothing more: the optimizer's step hooks see
them (the backward passes per step, the gradient's norm at the step, the rate each step used).

or `probe(...)` with a recipe (model factory, batches, loss, optimizer factory) runs a short loop itself.
The measurements come from harness.instruments and harness.reference (the very code the grid's cells use), as
one plain mapping with the keys of a grid record; analysis.features turns it into the features and
analysis.rules into the verdict, with the thresholds fitted for the step budget nearest to the steps seen.
A NaN or inf training loss is a finding of its own that comes first (doctor/nonfinite.py; the watch that finds it
is one of the instruments, harness/instruments/nonfinite.py); so is padding the loss scores, read from the batches'
attention mask (harness/instruments/padding.py, judged by the check padding_in_loss). Nothing here knows what
fault, if any, is planted.
Under torch.distributed (DDP under torchrun) each rank runs the same lines with its own Doctor and calls report()
too: each rank measures its own loop with no collective, and the report gathers every rank's evidence once and
puts the findings across ranks first (doctor/distributed.py).

Batches of any shape (harness/batches.py): (inputs, targets) pairs, longer tuples, dicts such as Hugging Face's
{"input_ids": ..., "labels": ...}, objects with attributes, several inputs to the model, a model returning an
object that holds the logits. Where the doctor cannot tell, the user says once:

    Doctor(model, optimizer, loss_fn, loader, inputs=("input_ids", "attention_mask"), targets="labels")
    Doctor(model, optimizer, loss_fn, loader, inputs=lambda b: b.image, targets=lambda b: b.label, output="logits")

The task is read from the first batch's targets and the model's output (harness/targets.py): class indices
with (batch, C) outputs, one-hot rows, binary targets with one output unit, multi-label rows, regression
targets shaped like the output, or class indices per position with (batch, time, V) outputs (a sequence). A
causal language model that shifts its labels itself (scores the logits at t against label t + 1) is read so from
its own loss on the first batch (`causal_shift`), and every batch's targets are then read shifted.
What the doctor cannot judge it refuses with `CannotJudge` (UnsupportedTask for a batch, model or task it does
not cover: a batch whose inputs or targets it cannot find, targets of none of those tasks), a class label outside
the output's classes that the loss does not ignore (its ignore_index; labels it ignores are left out of every
measurement), and a model with no parameters. Exceptions raised by the user's own model, loss or data code pass
through unchanged.

A step budget and a time budget, `Doctor(..., max_steps=N, max_seconds=S)`, stop the watch handing out batches
once either is spent; the report says the run was cut there. `doctor.interrupted()` after a KeyboardInterrupt
makes the report of the steps so far say it was interrupted (the probe loop and doctor/recipe.py do it on Ctrl-C).
"""

import contextlib
import dataclasses
import functools
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import torch
from torch import nn

from analysis.checks import CHECKS
from analysis.checks.numerics import AMP_STEPS_SKIPPED
from analysis.checks.numerics import CHECKS as NUMERIC_CHECKS
from analysis.data_forecast import DataForecast, data_forecast
from analysis.features import FEATURES, RESTS_ON_REFERENCES, features, too_few_for_references, too_few_in_class
from analysis.forecast import Forecast, forecast
from analysis.rules import GRID_FACTS, HEALTHY, RULES, UNEXPLAINED, VERDICTS, WARNING, Finding, load_thresholds
from analysis.rules import diagnose as rule_findings
from doctor import distributed
from doctor.machine import Checklist, bigger_machine, memory_line
from doctor.nonfinite import READS_TRAINED_ACCURACY
from doctor.nonfinite import finding as nonfinite_finding
from doctor.validation_reads import ValidationReads
from harness.after_training import FIT_COLUMNS, MEMORIZATION, Probes, end_of_run, run_record
from harness.batches import (
    BatchError,
    BatchLayout,
    apply,
    floats,
    forward_signature,
    head,
    join,
    rows,
    same_shape,
    to_device,
)
from harness.eval_mode import eval_mode
from harness.evaluation import evaluate
from harness.instruments import CAPACITY_EXAMPLES, Instruments, example_rows
from harness.instruments.budget import REPORT_SHARE, SHARE, Cost, CostBudget, ReportBudget
from harness.instruments.causality import next_token_input
from harness.instruments.loop import Collector
from harness.instruments.memorization import CAPACITY_STEPS, MEMORIZE_STEPS
from harness.instruments.nonfinite import Origin
from harness.instruments.padding import PaddingWatch
from harness.instruments.probe import FirstLayer, first_layer_input
from harness.instruments.ranks import RankWatch
from harness.targets import (
    PositionLoss,
    Task,
    TaskError,
    class_labels,
    in_classes,
    positions,
    read_task,
    shifted,
)
from harness.text import pair_count_losses


class CannotJudge(Exception):
    """The doctor cannot judge this run (the command line's exit status 2); the message says why, in one line."""


class UnsupportedTask(CannotJudge, ValueError):
    """The batches, model or task are not the ones the doctor covers: its rules would give a wrong verdict."""


class TaskFromLoss(UnsupportedTask):
    """The first batch's targets and the model's output make no task: it is read at the first step, from the loss.

    Not raised to the user unless the loss's own inputs make no task either (`Doctor._read_task_from_loss`): a loop
    may reshape the output before its loss (`output.view(-1, ntokens)`), decode it in a Lightning `training_step`,
    or score something other than the batch's targets (an autoencoder's inputs). Holds what the first layer was
    handed and the shape of the forward's output, for the reading at the first step.
    """

    def __init__(self, message: str, first: "FirstLayer", output_shape: tuple[int, ...]):
        super().__init__(message)
        self.first, self.output_shape = first, output_shape


class Interrupted(KeyboardInterrupt):
    """Ctrl-C with no report to give (before the first training step, or during the end-of-run measurements).

    A KeyboardInterrupt still, as the user asked to stop; the message says in one line when it came.
    """


def checked_limit(value, name: str, whole: bool) -> int | float | None:
    """A step budget (`whole`: an int) or a time budget in seconds, checked: above 0, or None for no budget.

    ValueError naming the value otherwise (the command line's --max-steps and --max-seconds read the same).
    """
    kinds = (int,) if whole else (int, float)
    if value is None or (isinstance(value, kinds) and not isinstance(value, bool) and 0 < value < math.inf):
        return value
    unit = "a whole number of training steps" if whole else "a number of seconds"
    none = " (None: no budget)" if name.startswith("max_") else ""
    raise ValueError(f"{name} must be {unit} above 0{none}, not {value!r}")


def check_budgets(max_steps, max_seconds) -> tuple[int | None, float | None]:
    """The step and time budgets, checked (None: no budget): the watch yields no batch once either is spent."""
    return checked_limit(max_steps, "max_steps", whole=True), checked_limit(max_seconds, "max_seconds", whole=False)


def _has_parameters(model: nn.Module) -> None:
    """CannotJudge for a model with no parameters: no optimizer can train it, and the doctor has nothing to read."""
    if next(iter(model.parameters()), None) is None:
        raise UnsupportedTask(
            f"the model has no parameters to train: {type(model).__name__} registers no nn.Parameter (layers kept in"
            " a plain list or dict rather than nn.ModuleList or nn.ModuleDict, or tensors not wrapped in"
            " nn.Parameter, are not registered)"
        )


COUNTED_SEQUENCES = CAPACITY_EXAMPLES  # a next-token run's last sequences whose tokens are counted
NO_TOKEN_COUNTS = {"lm_unigram_val_loss": math.nan, "lm_bigram_val_loss": math.nan, "lm_counts_val_se": math.nan}
RECENT_EXAMPLES = 256  # training accuracy is measured on at least this many of the last examples trained on


def _batch_size(targets: torch.Tensor) -> int:
    """Examples in a batch's targets (shape[0]: len() of a tensor costs more, and this runs every step)."""
    return targets.shape[0] if targets.dim() else 1


@contextlib.contextmanager
def refusing():
    """A batch or output the layout cannot read is a run the doctor cannot judge (exit status 2), said in one line."""
    try:
        yield
    except BatchError as error:
        raise UnsupportedTask(str(error)) from None


NO_VALIDATION = "no validation given"
# The validation reads' columns (harness/instruments/losses.py)
VAL_CURVE = ("val_steps", "val_loss_curve", "val_acc_curve")


@contextlib.contextmanager
def streams_kept(device: torch.device | None = None) -> Iterator[None]:
    """Run the block, then put back every random stream a program may draw from as the block found it.

    Torch's CPU generator (and the device's, on CUDA), numpy's global generator and Python's `random`. The doctor's
    own passes draw from them, or import what does: scikit-learn's first import (the quick references, at the
    report) imports `rich`, which draws from Python's `random` as it loads, so a seeded program's draws after
    report() differed with the doctor and without it.
    """
    python, legacy = random.getstate(), np.random.get_state()
    devices = [device] if device is not None and device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(legacy)


class OwnReading:
    """The user's validation batches, as the doctor reads them: without drawing on the run's random stream.

    Each iteration of a DataLoader draws a seed from torch's default CPU generator (`iter()`, shuffled or not), so
    every evaluation of the doctor's (before the first step, at the end, the references' examples) moved the
    training that followed: a seeded loop with a validation DataLoader gave other losses with the doctor than
    without it. Every random stream is put back when an iteration ends, however it ends (`streams_kept`; a `break`
    closes the generator). The doctor's evaluations run in eval mode, where a model draws nothing on its device. A
    one-pass iterator is refused (the doctor reads validation twice), and a pass that yields no batch is kept as
    `read_none`, for the report to say.
    """

    def __init__(self, batches: Iterable):
        if isinstance(batches, Iterator):  # a generator: the doctor's second pass would find it spent
            raise UnsupportedTask(
                f"validation is a one-pass iterator ({type(batches).__name__}): the doctor reads it before the first"
                " step and again at the report; pass a list of batches or a DataLoader"
            )
        self.batches = batches
        self.read_none = False  # the last pass yielded no batch (an empty loader: judged as without validation)

    def __iter__(self) -> Iterator:
        read = 0
        with streams_kept():
            for batch in self.batches:
                read += 1
                yield batch
        self.read_none = read == 0


class Doctor:
    """Watches one training loop. See the module docstring for the three lines."""

    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    input_scale = ""  # why the input scale was not measured ("" when it was, or means nothing: token ids)
    examples_not_rows = ""  # why the examples are not rows of the inputs ("" when they are), decided once per run
    _started: float | None = None  # when the watch first asked for a batch: the time budget runs from there

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable,
        batches: Iterable | None = None,
        *,
        validation: Iterable | None = None,
        model_factory: Callable[[], nn.Module] | None = None,
        census_every: int = 50,
        keep_batches: int = 8,
        memorize_steps: int = MEMORIZE_STEPS,
        capacity_examples: int = CAPACITY_EXAMPLES,
        capacity_steps: int = CAPACITY_STEPS,
        scaler: "torch.amp.GradScaler | None" = None,
        inputs=None,
        targets=None,
        output=None,
        budget: "float | CostBudget | None" = SHARE,
        max_steps: int | None = None,
        max_seconds: float | None = None,
        report_budget: "float | ReportBudget | None" = REPORT_SHARE,
    ):
        model = distributed.unwrapped(model)  # a DDP wrapper's module: the doctor's own forwards run no collective
        self.model, self.loss_fn, self.batches = model, loss_fn, batches
        _has_parameters(model)
        self.max_steps, self.max_seconds = check_budgets(max_steps, max_seconds)  # the watch stops once one is spent
        with refusing():  # where each batch keeps its inputs and targets (harness/batches.py); None: read from it
            self.layout = BatchLayout(model, inputs=inputs, targets=targets, output=output)
        self.memorize_steps = memorize_steps  # per rate, on a fresh model from model_factory (3 rates)
        # The capacity fit's examples: the last this many trained on (0: no capacity fit, so no model_too_small).
        if not (isinstance(capacity_examples, int) and capacity_examples >= 0):
            raise ValueError(f"capacity_examples must be an int >= 0 (0: no capacity fit), not {capacity_examples!r}")
        self.capacity_examples = capacity_examples if model_factory is not None else 0
        if not (isinstance(capacity_steps, int) and capacity_steps >= 0):
            raise ValueError(f"capacity_steps must be an int >= 0 (0: no capacity fit), not {capacity_steps!r}")
        self.capacity_steps = capacity_steps
        # Read through OwnReading: iterating a DataLoader draws its seed from the run's random stream.
        self.validation = OwnReading(validation) if validation is not None else None
        self.model_factory = model_factory
        # With mixed precision the loop's GradScaler: .grad holds gradients times its scale until unscale_.
        self.instruments = Instruments(
            model,
            optimizer,
            loss_fn,
            census_every,
            scaler=scaler,
            layout=self.layout,
            fresh_gradient=False,
            watch_nonfinite=True,  # any NaN or inf loss, and where it began (harness/instruments/nonfinite.py)
            # At most `budget` of the loop's own time: every step densely at first, then a sample of the optimizer
            # cycles (harness/instruments/budget.py); None watches every step whatever it costs.
            budget=budget if budget is None or isinstance(budget, CostBudget) else CostBudget(budget),
        )
        self.nonfinite = self.instruments.nonfinite
        # Validation read while the run trains, thinning out as it grows and within the budget: whether the run was
        # still learning when it stopped is read on validation where it was read often enough late in the run.
        self.val_reads = ValidationReads(self.instruments.budget) if validation is not None else None
        # The report's time after the loop: at most `report_budget` of the loop's own time or REPORT_FLOOR_S seconds,
        # whichever is larger (harness/instruments/budget.py); a fit that would run past it is cut. None: no cap (each
        # pass still timed). It keeps the fits it cut, for the report.
        if report_budget is None:
            report_budget = ReportBudget(floor_s=math.inf)
        self.report_budget = report_budget if isinstance(report_budget, ReportBudget) else ReportBudget(report_budget)
        # Under torch.distributed, this rank's own evidence for the checks across ranks (doctor/distributed.py),
        # gathered once at the report: nothing is exchanged while the loop trains.
        rank = distributed.world()
        self.ranks = RankWatch(model, optimizer, *rank, scaler=scaler) if rank is not None else None
        # The wait for data as the loop would show it on an idle host: the OS's pauses counted in neither the waits
        # nor the loop's time (harness/instruments/data_wait.py); the grid's cells keep the wall clock.
        self.instruments.data_wait.exclude_host_pauses = True
        # The last training batches, to measure training accuracy on: at least `keep_batches` of them and at least
        # RECENT_EXAMPLES examples (with a batch of 1, eight examples would make a coin of the accuracy); with a
        # model factory, as many as the capacity fit takes.
        self.recent: deque = deque()
        self.keep_batches, self._recent_examples = keep_batches, 0
        self._keep_examples = max(RECENT_EXAMPLES, self.capacity_examples)
        self.task: Task | None = None  # read once, from the first batch (check_task)
        # The loss as the doctor calls it on the model's output: the loop's own, called on a sequence's positions
        # the way the loop calls it (harness/targets.py: PositionLoss); set with the task.
        self.task_loss: Callable | None = loss_fn
        # A causal model's shift, read at the first batch (causal_shift): 1 where the model scores the output at t
        # against the label at t + 1, and the doctor then reads every batch's targets shifted (BatchLayout).
        self.shift = 0
        self.padding: PaddingWatch | None = None  # a sequence task's watch for padding scored by the loss
        self._first: FirstLayer | None = None  # what the model's first layer saw on the first batch, until read
        self._shift_check: ShiftInTheLoop | None = None  # a sequence read unshifted: the first step's loss, checked
        self._unread: TaskFromLoss | None = None  # a task to read at the first step, from what the loss received
        # Why the doctor's own evaluations are not run ("" where they are): the loss reads a prediction that
        # forward()'s output does not give (a decoder in the step), so no evaluation of the doctor's would be the run's.
        self.own_evaluations = ""
        self.rows_are_positions = False  # the loss's rows are positions of a (time, batch) output the loop flattened
        self.instruments.first_look = self._first_look  # the first batch is read before the instruments see it
        self.val_start: tuple[float, float] | None = None
        self.error: BaseException | None = None
        self.unmemorized = "no model factory given"  # why memorization was not measured, if it was not
        self.memorized_on = 0  # examples memorization fitted
        self.cost: Cost | None = None  # what the instruments cost on the loop, read as it ends (None: no budget)
        self._observed: Observed | None = None  # set by finish(): the watch is over
        self._report: Report | None = None  # report() with the fitted thresholds, kept

    def __iter__(self) -> Iterator:
        if self.batches is None:
            raise TypeError(
                "give Doctor the batches (Doctor(model, optimizer, loss_fn, loader)) or use doctor.watch(loader)"
            )
        return self.watch(self.batches)

    def watch(self, batches: Iterable) -> Iterator:
        """Yield the batches as they are, timing the wait for each; the first is read for the task.

        With a step or time budget (max_steps, max_seconds) no batch is yielded once either is spent.
        """
        if self.ranks is not None:
            self.ranks.new_pass(batches)  # a pass over the loader begins: an epoch, whose order is compared
        self.instruments.data_wait.loader(batches)  # its workers, read before a budget wraps it: the advice reads them
        if self.max_steps is not None or self.max_seconds is not None:
            batches = self._within_budget(batches)  # without a budget, no check at all on each step
        with refusing():  # the user's loop body does not run in here: only the doctor's reading of each batch
            yield from self.instruments.watch(batches, then=self._seen)

    def _within_budget(self, batches: Iterable) -> Iterator:
        """The batches until the step or time budget is spent, checked before each is fetched (none is left untrained).

        Steps are the backward passes after_backward saw; the time runs from the watch's first batch, across
        epochs (a new watch of the next epoch yields nothing once a budget is spent).
        """
        if self._started is None:
            self._started = time.perf_counter()
        iterator = iter(batches)
        while True:
            if self.max_steps is not None and self.steps >= self.max_steps:
                self.stopped = f"cut at the step budget, max_steps={self.max_steps}"
                return
            if self.max_seconds is not None and time.perf_counter() - self._started >= self.max_seconds:
                self.stopped = f"cut at the time budget, max_seconds={self.max_seconds:g}"
                return
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch

    def interrupted(self) -> None:
        """Say the run was stopped by Ctrl-C: the report of the steps so far says so.

        For a loop that catches KeyboardInterrupt and reports anyway (the command line does): call it, then report().
        """
        self.stopped = f"interrupted (Ctrl-C) after {self.steps} steps"

    def see(self, batch, waited_s: float = 0.0) -> None:
        """One batch the loop is about to train on, for loops the doctor does not iterate (a framework's callbacks).

        Call it before the batch's forward pass, with the seconds the loop waited for the batch.
        """
        with refusing():
            self.instruments.see(batch, waited_s, then=self._seen)

    def _first_look(self, batch, inputs, targets) -> tuple:
        """The first batch, before any instrument sees it: the task (check_task) and, for a sequence, the shift.

        Returns the batch's inputs and targets as the instruments are to see them (shifted, where the model shifts).
        Where the batch's targets and the model's output make no task, the task is read at the first step from what
        the loss received (`_read_task_from_loss`).
        """
        self.instruments.first_look = None
        try:
            self.task, self._first, self.task_loss = check_task(self.model, self.layout, inputs, targets, self.loss_fn)
        except TaskFromLoss as unread:
            self._unread, self._first = unread, unread.first
            return inputs, targets
        self.instruments.task_read(self.task.kind)  # the instruments' first forward names only the loss
        if self.task.kind != "sequence":
            return inputs, targets
        # A next-token run's token counts (_sequence_yardsticks) are counted on the last sequences kept: as many as a
        # capacity fit takes, with a model factory or without one.
        self._keep_examples = max(self._keep_examples, COUNTED_SEQUENCES)
        ignore_index = getattr(self.task_loss, "ignore_index", None)
        ignore_index = ignore_index if isinstance(ignore_index, int) else -100  # F.cross_entropy's, Hugging Face's
        with self.instruments.loop.own_forward_pass():
            self.shift = causal_shift(self.model, self.layout, batch, inputs, targets, self.task_loss, ignore_index)
        if self.shift:
            self.layout.target_view = functools.partial(shifted, shift=self.shift, fill=ignore_index)
            targets = self.layout.target_view(targets)
        self.padding = PaddingWatch(self.task.n_classes, ignore_index, self.shift)
        self.instruments.padding.watch = self.padding  # counted by the instruments' collector, on every batch
        if not self.shift and self.task_loss is not None:
            self._shift_check = ShiftInTheLoop(self.instruments.loop, self.task_loss, ignore_index)
            self.instruments.collectors.append(self._shift_check)  # so that its hook comes off with theirs
        return inputs, targets

    def _seen(self) -> None:
        inputs, targets = self.instruments.last_inputs, self.instruments.last_targets
        if self._first is not None:
            # Integer inputs cast inside forward (uint8 pixels): the scale the first layer sees (instruments/probe.py).
            self.input_scale = self.instruments.probe_batch.scale_seen_by_model(self._first)
            self._first = None
            if self.validation is not None and self.task is not None:  # else read with the task, at the first step
                self.val_start = self._read_validation(0)
        elif self._validation_due():
            self._read_validation(self.steps)
        if self.ranks is not None:
            self.ranks.batch(inputs, targets)
        # Remembered for the training accuracy, inline: this runs on every step of the user's loop.
        self.recent.append((inputs, targets))
        self._recent_examples += _batch_size(targets)
        while (
            len(self.recent) > self.keep_batches
            and self._recent_examples - _batch_size(self.recent[0][1]) >= self._keep_examples
        ):
            self._recent_examples -= _batch_size(self.recent.popleft()[1])

    def _validation_due(self) -> bool:
        """Whether validation is read before this step, for the still-learning reading (doctor/validation_reads.py)."""
        if self.val_reads is None or self.task is None or self.own_evaluations or self.val_start is None:
            return False
        return self.val_reads.due(self.steps, self.instruments.data_wait.loop_start)

    def _read_validation(self, step: int) -> tuple[float, float]:
        """Validation's loss and score on the weights after `step` steps, kept as the run's validation curve."""
        began = time.perf_counter()
        read = self._evaluate(self.validation)
        self.instruments.log_validation(step, *read)
        self.val_reads.read(step, time.perf_counter() - began)
        return read

    def _evaluate(self, batches: Iterable, split: bool = True) -> tuple[float, float]:
        """Loss and score on batches as the loop's (split=True) or on (inputs, targets) pairs already split."""
        layout = self.layout if split else self.layout.already_split()
        return evaluate(self.model, self.task_loss, batches, task=self.task.kind, layout=layout)

    def after_backward(self, loss: torch.Tensor) -> None:
        """Call once per step, after loss.backward() and before optimizer.step()."""
        if self._shift_check is not None:
            check, self._shift_check = self._shift_check, None
            try:  # the first step's: UnsupportedTask if the loop shifts
                check.judge(loss, self.instruments.last_targets)
            except UnsupportedTask:
                self.instruments.loss_inputs.leave()  # the step ends here: no mode may outlive it
                raise
        self.instruments.after_backward(loss)
        if self._unread is not None:  # the first step: its loss's inputs were read (step 0 is a census step)
            self._read_task_from_loss()

    def _read_task_from_loss(self) -> None:
        """The task from the prediction and target the loss received at the first step, and how to reach them.

        Where the prediction is forward()'s output reshaped (the same elements, the same last dimension: a loop's
        `output.view(-1, ntokens)`) and the target the batch's reshaped, the layout reads them so from then on, and
        every evaluation of the doctor's is the loop's. Where it is not (a decoder applied in the step, a target that
        is not the batch's), the task is still the loss's, and the doctor's own evaluations are not run: the run is
        judged on its own loop (the loss it computed, gradients, updates, the loss's inputs). UnsupportedTask where
        the loss's inputs make no task either, or could not be read.
        """
        unread, self._unread = self._unread, None
        call = self.instruments.loss_inputs.last_call
        if call is None or call.target is None:
            raise UnsupportedTask(f"{unread} (and the loss's own inputs could not be read at the first step)")
        try:
            task = read_task(call.target, call.prediction)
        except TaskError as error:
            raise UnsupportedTask(f"what the loss received makes no task either: {error}") from None
        prediction, target = tuple(call.prediction.shape), tuple(call.target.shape)
        batch_targets = self.instruments.last_targets
        same_output = math.prod(unread.output_shape) == call.prediction.numel() and (
            unread.output_shape[-1:] == prediction[-1:]
        )
        same_targets = torch.is_tensor(batch_targets) and batch_targets.numel() == call.target.numel()
        if same_output and same_targets:
            if prediction != unread.output_shape:
                self.layout.output_view = functools.partial(_rows_of, tail=prediction[1:])
                self.rows_are_positions = len(unread.output_shape) > len(prediction)  # (T, B, V) -> (T * B, V)
            if target != tuple(batch_targets.shape):
                view = self.layout.target_view = functools.partial(_rows_of, tail=target[1:])
                self.recent = deque((x, view(y)) for x, y in self.recent)  # the first step's, split before the view
        else:
            self.own_evaluations = (
                f"the loss compared a prediction of {prediction} with a target of {target}, which forward()'s output"
                f" {unread.output_shape} and the batch's targets"
                f" {tuple(batch_targets.shape) if torch.is_tensor(batch_targets) else '(none)'} do not give (a"
                " decoder or another step between them?)"
            )
            self.instruments.loop.output_is_prediction = False
        self.task, self.task_loss = task, self.loss_fn
        self.instruments.task_read(task.kind)
        self.instruments.outputs.read_loss_again()  # named at the next census forward, read as the loss reads it
        if self.validation is not None and not self.own_evaluations:
            self.val_start = self._read_validation(0)  # the weights are still the first: no step yet

    @property
    def steps(self) -> int:
        return self.instruments.step + 1

    def finish(self) -> "Observed":
        """End the watch: take the hooks off, measure what is left (the fits, the evaluations), return the run.

        Call it once training has ended; report() calls it. Later calls return the same observation.
        """
        if self._observed is None:
            # Every rank's evidence first, before anything here can refuse the run: the other ranks wait in the gather.
            ranks = distributed.gather(self.ranks.evidence()) if self.ranks is not None else None
            if self.ranks is not None:
                self.ranks.close()
            with refusing(), streams_kept(self._device):  # the run's random streams as the loop left them
                measured = self._measurements()
            device = next(self.model.parameters()).device
            out_of_memory = str(self.error) if isinstance(self.error, torch.OutOfMemoryError) else None
            self._observed = Observed(
                MappingProxyType(measured),
                self.steps,
                self.val_start,
                on_accelerator=device.type == "cuda",
                memory=memory_line(device),
                out_of_memory=out_of_memory,
                nonfinite=self.nonfinite.origin,
                unmemorized=self.unmemorized,
                cut_at_report=MappingProxyType(dict(self.report_budget.cut)),
                unvalidated=self._unvalidated(),
                memorized_on=self.memorized_on,
                cost=self.cost,
                stopped=self.stopped,
                input_scale=self.input_scale,
                examples_not_rows=self.examples_not_rows,
                own_evaluations=self.own_evaluations,
                rows_are_positions=self.rows_are_positions,
                ranks=ranks,
            )
        return self._observed

    def _unvalidated(self) -> str:
        """Why the run is judged without validation ("" where it is not)."""
        if self.validation is None:
            return NO_VALIDATION
        if self.validation.read_none:
            return "the validation given yielded no batch: judged as without validation"
        return ""

    def measurements(self) -> dict:
        """Everything measured, keyed like the grid's record columns (NaN where it could not be measured).

        Only once the watch is over (finish(), or report()): asking does not end it.
        """
        if self._observed is None:
            raise RuntimeError(
                "the doctor is still watching this run: call doctor.finish() after the last step (doctor.report()"
                " finishes it too), then doctor.measurements()"
            )
        return dict(self._observed.measurements)

    def _measurements(self) -> dict:
        """Every column: the instruments', then what is measured once the run is over.

        That is the final losses and scores, memorization, the capacity fit and the quick references.
        """
        if self.task is None:
            raise CannotJudge("the doctor saw no batch: wrap the loop's batches with the doctor (doctor.watch(loader))")
        if self.instruments.step < 0:
            raise CannotJudge(
                "the doctor saw no training step: call doctor.after_backward(loss) once per step, after loss.backward()"
            )
        self.cost = self.instruments.cost  # as the loop ends: the evaluations and fits after it are not its time
        budget = self.report_budget
        budget.start(self.cost.loop_s if self.cost is not None else self._loop_s())
        with budget.timed("last readings"):
            measured = self.instruments.finish()
            if self.instruments.scaler is None:
                _no_hidden_scaler(self.instruments.kept_at_step)
        with budget.timed("evaluations"):
            if self.own_evaluations:  # the doctor cannot compute the loop's prediction: the loop's training loss only
                train_loss, train_acc = _last_losses(measured.get("train_loss_curve")), math.nan
                val_loss = val_acc = math.nan
            else:
                train_loss, train_acc = self._evaluate(_last_batches(self.recent, self.keep_batches), split=False)
                val_loss, val_acc = self._evaluate(self.validation) if self.validation is not None else (math.nan,) * 2
                if self.validation is not None:  # the curve ends where the run did, as a cell's (harness/cell.py)
                    for column, value in zip(VAL_CURVE, (self.steps, val_loss, val_acc), strict=True):
                        measured[column] = [*measured[column], value]
        # Memorization and the capacity fit take examples by the inputs' first dimension; a loop whose inputs keep
        # the batch elsewhere (sequence first, (T, B, ...)) has no example rows to take: neither is measured.
        # Decided once for the run: the first batches' (the instruments keep examples from them), else the last's.
        not_rows = self.own_evaluations or self.instruments.examples.not_rows or _not_example_rows(self.recent)
        self.examples_not_rows = not_rows
        probes = Probes(
            memorize_steps=self.memorize_steps, capacity_steps=self.capacity_steps, forward=self.layout.forward
        )
        # The fresh models' fits train in training mode (dropout draws from the random streams): finish() puts the
        # run's streams back after them, so that the user's code after report() draws what it would have without the
        # doctor.
        with budget.timed("examples for the fits"):
            examples = (
                self._memorize_on(not_rows),
                self._capacity_on(not_rows),
                self.instruments.kept_examples(),
                self._held_out(),
                self._capacity_held_out(not_rows),
            )
        after = end_of_run(self.model_factory, self.task_loss, probes, *examples, budget=budget)
        if MEMORIZATION in budget.cut:
            self.unmemorized = f"cut at the report's time budget, {budget.cut[MEMORIZATION]}"
        scores = {
            "final_train_loss": train_loss,
            "final_train_acc": train_acc,
            "final_val_loss": val_loss,
            "final_val_acc": val_acc,
        }
        record = run_record(measured, scores, after, self.task.n_classes, self.task.uninformed_loss)
        if self.task.kind == "sequence":  # no reference fit measured it: held against validation, not the training mix
            with budget.timed("sequence yardsticks"):
                record.update(self._sequence_yardsticks())  # the class prior, and what counting tokens reaches
            record["target_shift"] = self.shift  # the doctor's own (no record column): the causal shift it read
        if self.padding is not None:  # the labels under padding tried on the loss, which the collector cannot call
            with budget.timed("padding"):
                record.update(self.padding.measurements(self.recent, self.task_loss))
        if self.cost is not None:  # what the doctor spent after the loop, pass by pass, and the caps its fits ran under
            self.cost = dataclasses.replace(
                self.cost,
                after_s=budget.spent_s,
                after_caps=_fit_caps(probes, after),
                after_passes=MappingProxyType(dict(budget.passes)),
                after_cut=MappingProxyType(dict(budget.cut)),
                after_budget_s=budget.allowed_s,
            )
        return record

    def _loop_s(self) -> float:
        """The loop's time from its first batch to now, where no cost budget measured its own (budget=None)."""
        return time.perf_counter() - self._started if self._started is not None else 0.0

    def _sequence_yardsticks(self) -> dict[str, float]:
        """A sequence's yardsticks on validation, read in one pass over it (NaN without validation).

        `baseline_val_acc`: the validation accuracy of always answering the most frequent training label, on the
        positions the loss scores. The reference fit measures it for one class per example; a sequence gets no
        reference fit, and its validation text need not share the training text's class mix, so the validation
        accuracy is held against this rather than the training prior.

        The unigram and bigram counts' validation losses, on a next-token run (harness/text.py): counted on the
        (previous token, next token) pairs of the last training sequences the doctor kept (COUNTED_SEQUENCES of
        them), scored on every validation batch's: the yardstick the grid's language models are held against
        (analysis/rules.py: the outcome gate), from the user's own tokens. NaN where the doctor cannot run its own
        evaluation, or where the task is not next-token prediction.
        """
        found = {"baseline_val_acc": math.nan, **NO_TOKEN_COUNTS}
        if self.validation is None:
            return found
        classes, label_counts = self.task.n_classes, self.instruments.labels.label_counts
        majority = int(label_counts.argmax()) if label_counts is not None and int(label_counts.sum()) else None
        train = None if self.own_evaluations else _token_pairs(self.recent, classes)
        hits = kept = 0
        val: list | None = [] if train is not None else None
        for batch in self.validation:
            x, y = self.layout.split(batch, "validation")
            if majority is not None:
                labels = y.reshape(-1)
                valid = in_classes(labels, classes)
                hits += int(((labels == majority) & valid).sum())
                kept += int(valid.sum())
            if val is not None:
                pair = _token_pairs([(x, y)], classes)
                if pair is None:  # not next-token prediction: no counts
                    val = None
                else:
                    val.append(pair)
        if majority is not None and kept:
            found["baseline_val_acc"] = hits / kept
        if train is not None and val:
            before, after = np.concatenate([b for b, _ in val]), np.concatenate([a for _, a in val])
            found.update(pair_count_losses(train, (before, after), classes))
        return found

    @property
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _memorize_on(self, not_rows: str) -> tuple | None:
        """The first 16 finite examples, on the model's device, for memorization (None: not measured, and why)."""
        if not_rows and self.model_factory is not None:
            self.unmemorized = not_rows
        if self.model_factory is None or self.instruments.probe is None or not_rows:
            return None
        x, y = _first_examples(self.recent, 16)
        finite = torch.ones(len(y), dtype=torch.bool)  # NaN or inf examples cannot be fitted: leave them out
        for values in floats(x):
            finite &= torch.isfinite(values.reshape(len(values), -1)).all(dim=1).cpu()
        x = _take(x, finite)
        y = y[finite.to(y.device)]
        self.memorized_on = len(y)
        if not len(y):
            self.unmemorized = "every example it would fit holds NaN or inf"
            return None
        return to_device(x, self._device), y.to(self._device)

    def _capacity_on(self, not_rows: str) -> list[tuple]:
        """The last finite examples the capacity fit takes, as (inputs, targets) batches on the model's device.

        Empty where the task's checks do not read the fit (`_capacity_read`).
        """
        if not self._capacity_read():
            return []
        pairs = _finite_pairs(self.recent, self.capacity_examples) if not not_rows else []
        return [(to_device(x, self._device), y.to(self._device)) for x, y in pairs]

    def _capacity_read(self) -> bool:
        """Whether any check reads a capacity fit on this run's task: not on a sequence task.

        There model_too_small is not judged and a clean copy's per-position accuracy is no yardstick of the gate's;
        on a language model the fit cost the most of any measurement (334 s after a 3.8 s run of a tiny GPT-2 under
        the Trainer).
        """
        return self.task is None or self.task.kind != "sequence"

    def _capacity_held_out(self, not_rows: str) -> list[tuple] | None:
        """The first finite validation examples, as many as the capacity fit takes, on the model's device.

        The fitted copy is scored on them: what this model reaches on the run's data in a clean loop. None without
        validation, a capacity fit, or example rows.
        """
        if self.validation is None or not_rows or not self.capacity_examples or self.model_factory is None:
            return None
        if not self._capacity_read():  # no capacity fit: its validation examples are not read either
            return None
        pairs = _finite_pairs(_first_of(self.validation, self.layout, self.capacity_examples), self.capacity_examples)
        return [(to_device(x, self._device), y.to(self._device)) for x, y in pairs] or None

    def _held_out(self) -> tuple | None:
        """The validation examples the references are scored on (None without validation, or for a sequence)."""
        if self.validation is None or self.task.kind == "sequence":  # a label per position: no reference fit
            return None
        classes = self.task.n_classes if self.task.kind == "multiclass" else None
        return _examples(self.validation, self.layout, self.instruments.keep_examples, self.task.kind, classes)

    def report(self, thresholds: dict[str, float] | None = None) -> "Report":
        """finish() the watch and diagnose() the run: the verdict, the findings, and the bigger-machine check.

        Without `thresholds`, those fitted for the step budget nearest to the run's steps (the report is kept).
        """
        if thresholds is not None:
            return diagnose(self.finish(), thresholds)
        if self._report is None:
            self._report = diagnose(self.finish())
        return self._report


@dataclass(frozen=True)
class Observed:
    """One finished run as the doctor saw it: everything `diagnose` reads (no model, no hooks, no device).

    `measurements` is keyed like a grid record's columns; the rest is what the verdict and the checklist need
    beside them: the validation (loss, score) before training, where the run ran and its memory, the first
    non-finite value's origin, and how memorization went.
    """

    measurements: Mapping
    steps: int
    val_start: tuple[float, float] | None = None
    on_accelerator: bool = False
    memory: str = "CPU run"  # the accelerator's peak allocation against its size
    out_of_memory: str | None = None  # the error, where the loop ran out of memory
    nonfinite: Origin | None = None  # where the first NaN or inf came from (harness/instruments/nonfinite.py)
    unmemorized: str = "no model factory given"  # why memorization was not measured, if it was not
    unvalidated: str = NO_VALIDATION  # why the run was judged without validation ("" where it was not)
    memorized_on: int = 0  # examples memorization fitted
    # The fits after the loop cut at the report's time budget, and where (read-only, as a kept run reads it back)
    cut_at_report: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cost: Cost | None = None  # what the doctor's instruments cost on the loop (None: watched without a budget)
    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    input_scale: str = ""  # why the input scale was not measured ("" when it was, or means nothing: token ids)
    examples_not_rows: str = ""  # why the examples are not rows of the inputs ("" when they are): no reference fit
    # Why the doctor ran no evaluation of its own ("" where it did): the loss reads a prediction forward() does not give
    own_evaluations: str = ""
    rows_are_positions: bool = False  # the loss's rows are a sequence's positions, flattened by the loop
    # Under torch.distributed: every rank's evidence (harness/instruments/ranks.py), this rank's number, the world's
    # size and whether the gather reached every rank (doctor/distributed.py: gather). None on one process.
    ranks: Mapping | None = None


def diagnose(observed: Observed, thresholds: Mapping[str, float] | None = None) -> "Report":
    """The report on a finished run; it changes nothing and reads only `observed` and the thresholds.

    Without `thresholds`: the fitted ones of the step budget nearest to the run's steps (analysis/thresholds.json).
    """
    thresholds = load_thresholds(observed.steps) if thresholds is None else thresholds
    measured = observed.measurements
    rules = RULES
    if observed.rows_are_positions:  # a sequence flattened by the loop: its checks not judged (NOT_JUDGED_ON_TASK)
        unjudged = {v for _, verdicts in NOT_JUDGED_ON_TASK["sequence"] for v in verdicts}
        rules = [rule for rule in RULES if rule.verdict not in unjudged]
    findings, note = _findings(observed, thresholds, rules)
    for fact in reversed(JUDGED_FACTS):  # each goes after the numeric facts, so the first of them ends up first
        found = fact.judge_fact(measured)
        if found is not None:
            findings = _with_fact(findings, found)
    across = distributed.judge(observed.ranks)
    if across is not None and across.findings:  # facts of the setup, ahead of what any one rank's steps show
        findings = [*across.findings, *(f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED))]
    if observed.input_scale:  # said, not silent: the rule reading it could not be judged
        unscaled = f"unscaled_inputs not judged: the input scale was not measured ({observed.input_scale})"
        note = unscaled if note is None else f"{note}; {unscaled}"
    own = observed.own_evaluations
    own = own and f"judged on the loop's own losses, no evaluation of the doctor's (accuracy, validation, fits): {own}"
    beyond = _beyond_the_task(measured, observed.rows_are_positions)
    empty = observed.unvalidated if observed.unvalidated != NO_VALIDATION else None  # given, and read as none
    unjudged_notes = (
        empty,
        own,
        beyond,
        _too_few_examples(measured),
        _too_few_in_class(measured),
        _no_rows(observed),
        _cut_at_report(observed),
    )
    for unjudged in unjudged_notes:
        if unjudged:
            note = unjudged if note is None else f"{note}; {unjudged}"
    return Report(
        tuple(findings),
        bigger_machine(observed, findings[0].verdict, thresholds["starved_loader"]),
        observed.steps,
        measured,
        MappingProxyType(features(measured)),
        note,
        # Would longer training help? The training loss carried to 2x and 4x the steps (analysis/forecast.py).
        forecast=forecast(measured.get("train_loss_curve")),
        # Would more data help? The quick references refitted on shares of the examples (analysis/data_forecast.py).
        data_forecast=data_forecast(
            measured.get("data_curve_examples"),
            measured.get("data_curve_val_acc"),
            measured.get("reference_val_examples"),
        ),
        cost=observed.cost,
        stopped=observed.stopped,
        ranks=across,
        read_as=_read_as(observed),
    )


def _read_as(observed: Observed) -> str:
    """One line: the loss the run's loss was computed from and its inputs' shapes, and what the examples are.

    Decided once per run (the loss's inputs on census steps, the example axis from the first batches); "" for a run
    observed before the loss's inputs were read (an older kept observation).
    """
    measured = observed.measurements
    loss, shapes = measured.get("loss_read"), measured.get("loss_shapes")
    if loss is None:
        return ""
    said = f"the loss: {loss} on {shapes}" if loss else "the loss: no torch.nn.functional loss was read"
    if observed.own_evaluations:
        examples = "the doctor's own evaluations not run (the loss reads another prediction than forward()'s)"
    elif observed.rows_are_positions:
        examples = "its rows are positions of the loop's (time, batch) output, flattened"
    elif observed.examples_not_rows:
        examples = f"examples not the inputs' rows ({observed.examples_not_rows})"
    else:
        examples = "examples: the rows of the inputs' first dimension"
    return f"{said}; {examples}"


# The checks a task leaves without what they read, and why: a check that cannot judge a task says so in the report
# (`not_judged` in the JSON, its feature null), never a pass and never a cause it cannot support.
NOT_JUDGED_ON_TASK = {
    "sequence": (
        (
            # shuffled_labels: the model's accuracy alone cannot tell unlearnable labels from text that leaves
            # little to predict (analysis/features.py: learnable_skill).
            "no quick reference fits a label per position",
            ("shuffled_labels", "label_noise", "class_imbalance", "model_too_small"),
        ),
        ("a batch's positions are no independent draws of a label", ("unshuffled_batches",)),
    )
}


NUMERIC_FACTS = tuple(check.verdict for check in NUMERIC_CHECKS)  # judged first: nonfinite_loss, amp_steps_skipped
# The facts judged on the measurements, in order: the grid's, then those only the doctor's watch reads for a verdict
# (params_left_out: a whole-run reading of the watched model).
JUDGED_FACTS = [
    *GRID_FACTS,
    *(c for c in CHECKS if c.fact is not None and not c.in_grid and c.verdict not in NUMERIC_FACTS),
]


def _beyond_the_task(measured: Mapping, positions: bool = False) -> str | None:
    """Which checks this run's task leaves unjudged (their feature not measured), and why; None: none.

    `positions`: the loss's rows are a sequence's positions, flattened by the loop (`output.view(-1, ntokens)`):
    judged as a sequence, whatever its rows' task, and those checks are not judged whatever their feature reads.
    """
    task = "sequence" if positions else measured.get("task")
    values, said = features(measured), []
    for why, verdicts in NOT_JUDGED_ON_TASK.get(task, ()):
        unjudged = [v for v in verdicts if v in VERDICTS and (positions or math.isnan(values[VERDICTS[v].feature]))]
        if unjudged:
            said.append(f"{', '.join(unjudged)} ({why})")
    return f"not judged on {task} outputs: {'; '.join(said)}" if said else None


def _no_rows(observed: Observed) -> str | None:
    """Which checks rest on quick references that no example rows could be fitted with, and why (None: they could)."""
    positions = observed.rows_are_positions or observed.measurements.get("task") == "sequence"  # the task's note
    if not observed.examples_not_rows or observed.own_evaluations or positions:
        return None
    values = features(observed.measurements)
    unjudged = [r.verdict for r in RULES if r.feature in RESTS_ON_REFERENCES and math.isnan(values[r.feature])]
    if not unjudged:
        return None
    return f"not judged: {', '.join(unjudged)} (no quick reference was fitted: {observed.examples_not_rows})"


def _cut_at_report(observed: Observed) -> str | None:
    """Which checks read a fit the report's time budget cut, and where it was cut (None: no fit was cut)."""
    said = []
    for fit, where in observed.cut_at_report.items():
        reads = {f.name for f in FEATURES.values() if set(f.reads) & set(FIT_COLUMNS[fit])}
        unjudged = [rule.verdict for rule in RULES if rule.feature in reads]
        what = f"{', '.join(unjudged)} not judged: " if unjudged else ""
        said.append(f"{what}{fit} was cut at the report's time budget ({where}; Doctor(report_budget=) sets it)")
    return "; ".join(said) or None


def _too_few_examples(measured: Mapping) -> str | None:
    """Which checks rest on quick references scored on too few examples to judge by (None: enough, or none)."""
    why = too_few_for_references(measured)
    if why is None:
        return None
    unjudged = [rule.verdict for rule in RULES if rule.feature in RESTS_ON_REFERENCES]
    return f"not judged: {', '.join(unjudged)}, and whether the run fell short ({why})"


def _too_few_in_class(measured: Mapping) -> str | None:
    """Which checks read one class's validation count that is too small to judge by (None: none, or judged)."""
    why = too_few_in_class(measured)
    if why is None or too_few_for_references(measured) is not None:  # already said, with every reference check
        return None
    reads_a_class = {f.name for f in FEATURES.values() if "prior_shift_class_examples" in f.reads}
    return f"not judged: {', '.join(r.verdict for r in RULES if r.feature in reads_a_class)} ({why})"


def _findings(
    observed: Observed, thresholds: Mapping[str, float], rules: list = RULES
) -> tuple[list[Finding], str | None]:
    """The findings, and the note saying which rules were not judged (None: all were).

    The fitted rules' findings come after a non-finite loss, or after most steps skipped by the GradScaler, where
    either happened.
    """
    measured, origin = observed.measurements, observed.nonfinite
    # The grid's facts: in diagnose, below. A run its user cut short is judged on its outcome once its loss flattened.
    findings = rule_findings(measured, rules, dict(thresholds), facts=[], cut_short=observed.stopped is not None)
    fitted = [f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED)]
    if origin is not None:
        # Any NaN or inf training loss is the verdict; the fitted rules come after it, judged only where their
        # measurements can still mean something.
        first = nonfinite_finding(origin, observed.steps, measured["nonfinite_losses"])
        if origin.from_the_start:
            note = (
                f"no fitted rule was judged: the {origin.what.split()[0]} were non-finite from the first step, and"
                " every measurement the rules read saw them"
            )
            return [first], note
        note = "not judged on a non-finite run, as they read the trained model's accuracy: " + ", ".join(
            READS_TRAINED_ACCURACY
        )
        return [first, *(f for f in fitted if f.verdict not in READS_TRAINED_ACCURACY)], note
    skipped = AMP_STEPS_SKIPPED.judge_fact(measured)
    if skipped is not None:
        return [skipped, *fitted], None
    return findings, None


def _with_fact(findings: list[Finding], fact: Finding) -> list[Finding]:
    """The findings with a failing fact judged on no fitted threshold (padding_in_loss) after the numeric facts.

    It comes ahead of the fitted rules' findings: it is certain, and every loss they read counts what it names. It
    takes the place of healthy, and of unexplained_failure, whose failure it may explain.
    """
    kept = [f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED)]
    at = next((i for i, f in enumerate(kept) if f.verdict not in NUMERIC_FACTS or f.kind == WARNING), len(kept))
    return [*kept[:at], fact, *kept[at:]]


def _no_hidden_scaler(kept_at_step: list[float]) -> None:
    """Refuse a run whose gradients reached the optimizer divided by an exact power of two: a GradScaler's unscale.

    Without the scaler the census reads gradients still multiplied by its scale (2^16 at first): every
    gradient would look huge and every step clipped. Unscaling multiplies by 2^-k exactly, so the ratio is a power
    of two to float rounding (about 1e-7 in log2); clipping keeps max_norm / norm, within 1e-5 of one by chance
    about once in 50 000 steps measured.
    """
    for kept in kept_at_step:
        if 0 < kept <= 2**-3 and abs(math.log2(kept) - round(math.log2(kept))) < 1e-5:
            raise CannotJudge(
                f"the gradients reached optimizer.step() divided by exactly 2^{-round(math.log2(kept))}, as a"
                " GradScaler unscales them: pass the loop's scaler, Doctor(..., scaler=scaler), so that its scale is"
                " read"
            )


def _take(inputs, keep: torch.Tensor):
    """The examples of the inputs where `keep` is true."""
    return apply(inputs, lambda t: t[keep.to(t.device)])


def _last_batches(pairs: deque, least: int) -> list:
    """The last (inputs, targets) pairs holding at least RECENT_EXAMPLES examples and at least `least` pairs."""
    kept, examples = [], 0
    for x, y in reversed(pairs):
        if len(kept) >= least and examples >= RECENT_EXAMPLES:
            break
        kept.append((x, y))
        examples += _batch_size(y)
    return kept[::-1]


def _finite_pairs(pairs: Iterable, n: int) -> list:
    """Up to `n` of the last examples of these split batches, leaving out batches with NaN or inf inputs.

    Consecutive batches of the same shapes are joined into one pair: a loop of batches of 1 would otherwise make
    every step of the capacity fit a thousand forward passes of one example (the same gradient, far slower).
    """
    kept, have = [], 0
    for x, y in reversed(list(pairs)):
        if have >= n:
            break
        if y.dim() == 0 or not all(bool(torch.isfinite(values).all()) for values in floats(x)):
            continue
        take = min(len(y), n - have)
        kept.append((head(x, take), y[:take]))
        have += take
    joined: list[tuple] = []
    for x, y in kept[::-1]:
        if joined and same_shape(x, joined[-1][0][0]) and y.shape[1:] == joined[-1][1][0].shape[1:]:
            joined[-1][0].append(x)
            joined[-1][1].append(y)
        else:
            joined.append(([x], [y]))
    return [(join(xs), torch.cat(ys)) for xs, ys in joined]


def _fit_caps(probes: Probes, after: Mapping) -> str:
    """The caps the doctor's fits after the loop ran under, for the cost line: what each trained, and how long."""
    copy = after.get("capacity_examples", 0)
    parts = [
        f"memorization {probes.memorize_steps} steps x {len(probes.memorize_rates)} rates"
        if len(after.get("memorize_rates", ()))
        else "no memorization",
        f"a clean copy {probes.capacity_steps} steps x {len(probes.capacity_rates)} rates on {copy} examples"
        + (f", scored on {after['capacity_val_examples']} validation" if after.get("capacity_val_examples") else "")
        if copy
        else "no clean copy",
    ]
    return "; ".join(parts)


def _token_pairs(pairs: Iterable, classes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The (previous token, next token) pairs at the scored positions of next-token batches; None for another task.

    The previous token is the input at a position, the next one its label (harness/instruments/causality.py reads
    which input holds the tokens); labels the loss ignores (padding) are left out.
    """
    before, after = [], []
    for x, y in pairs:
        tokens = next_token_input(x, y, classes)
        if tokens is None:
            return None
        scored = in_classes(y, classes)
        before.append(tokens.to(y.device)[scored].cpu())
        after.append(y[scored].cpu())
    if not before:
        return None
    return torch.cat(before).long().numpy(), torch.cat(after).long().numpy()


def _first_of(batches: Iterable, layout: BatchLayout, n: int) -> list:
    """The first batches of a validation iterable, split as the loop's, until they hold at least `n` examples."""
    kept, have = [], 0
    for batch in batches:
        if have >= n:
            break
        kept.append(layout.split(batch, "validation"))
        have += _batch_size(kept[-1][1])
    return kept


def _last_losses(curve, last: int = 10) -> float:
    """The mean of the last training losses the loop computed (NaN without any): its own loss as the run ends."""
    values = [float(v) for v in (curve if curve is not None else [])][-last:]
    return sum(values) / len(values) if values else math.nan


def _rows_of(tensor: torch.Tensor, tail: tuple[int, ...]) -> torch.Tensor:
    """A tensor reshaped to rows of `tail`, as the loop reshapes it before its loss (`output.view(-1, ntokens)`)."""
    return tensor.reshape(-1, *tail)


def _not_example_rows(pairs: Iterable) -> str:
    """Why these split batches' inputs have no example rows to take, or "" when each has one row per target.

    The inputs' first dimension is the examples' unless the loop keeps the batch elsewhere (sequence first).
    """
    for x, y in pairs:
        if rows(x) != _batch_size(y):
            return (
                f"the inputs' first dimension ({rows(x)}) is not the targets' ({_batch_size(y)}): the examples are not"
                " rows of the inputs (sequence first?), so none can be taken to fit"
            )
    return ""


def _first_examples(pairs: Iterable, n: int) -> tuple:
    """The first `n` (inputs, targets) of these split batches, joined (batches shaped unlike the first are skipped)."""
    xs, ys, have = [], [], 0
    for x, y in pairs:
        if xs and (not same_shape(x, xs[0]) or y.shape[1:] != ys[0].shape[1:]):
            continue
        xs.append(head(x, n - have))
        ys.append(y[: n - have])
        have += len(ys[-1])
        if have >= n:
            break
    return join(xs), torch.cat(ys)


def _examples(
    batches: Iterable, layout: BatchLayout, limit: int, task: str | None, classes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Up to `limit` (inputs, class labels) of a validation iterable, inputs flattened to rows, on the CPU.

    None when the task has no class labels (multi-label, regression) or the inputs are not floating point.
    Labels outside [0, classes) are the loss's to ignore: those examples are left out.
    """
    xs, ys, n = [], [], 0
    for batch in batches:
        kept = example_rows(*layout.split(batch, "validation"), limit - n)
        labels = class_labels(kept[1], task) if kept is not None else None
        if labels is None:
            return None
        valid = in_classes(labels, classes)
        if not bool(valid.all()):
            kept, labels = (kept[0][valid], kept[1][valid]), labels[valid]
        xs.append(kept[0])
        ys.append(labels)
        n += len(kept[1])
        if n >= limit:
            break
    return (torch.cat(xs), torch.cat(ys)) if xs else None


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


def cycle(batches: Callable[[], Iterable] | Iterable) -> Iterator:
    """Batches without end: a new pass over `batches` (a DataLoader, or a function returning one) each epoch."""
    for _ in itertools.count():
        source = batches() if callable(batches) else batches
        empty = True
        for batch in source:
            empty = False
            yield batch
        if empty:
            raise CannotJudge("the batches are empty: batches() gave no batch to train on")


def probe(
    model_factory: Callable[[], nn.Module],
    batches: Callable[[], Iterable] | Iterable,
    loss_fn: Callable,
    optimizer_factory: Callable,
    steps: int = 300,
    validation: Iterable | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    inputs=None,
    targets=None,
    output=None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    budget: "float | CostBudget | None" = SHARE,
    memorize_steps: int = MEMORIZE_STEPS,
    capacity_steps: int = CAPACITY_STEPS,
    report_budget: "float | ReportBudget | None" = REPORT_SHARE,
) -> "Report":
    """Run a short standard training loop on the recipe's pieces under the doctor and return its report.

    `inputs`, `targets` and `output` say where batches keep their inputs and targets and which output the loss
    reads, as for `Doctor` (harness/batches.py), where the doctor cannot tell by itself; `max_steps` and
    `max_seconds` cut the loop short, and `budget`, `memorize_steps`, `capacity_steps` and `report_budget` are the
    doctor's cost budget, the lengths of its fits of fresh models and the report's time budget, as for `Doctor`. Ctrl-C
    (KeyboardInterrupt) during the loop ends it with the report of the steps so far; before the first step, or
    during the end-of-run measurements, it raises `Interrupted`.
    """
    checked_limit(steps, "steps", whole=True)
    torch.manual_seed(seed)
    device = torch.device(device)
    model = model_factory().to(device)
    _has_parameters(model)  # before the optimizer, which would refuse an empty parameter list in its own words
    optimizer = optimizer_factory(model.parameters())
    doctor = Doctor(
        model,
        optimizer,
        loss_fn,
        validation=validation,
        model_factory=model_factory,
        inputs=inputs,
        targets=targets,
        output=output,
        max_steps=max_steps,
        max_seconds=max_seconds,
        budget=budget,
        memorize_steps=memorize_steps,
        capacity_steps=capacity_steps,
        report_budget=report_budget,
    )
    layout = doctor.layout
    model.train()
    try:
        for _step, _batch in zip(range(steps), doctor.watch(cycle(batches)), strict=False):
            # The doctor has split this batch already (into inputs and targets, as the layout reads them).
            x, y = doctor.instruments.last_inputs, doctor.instruments.last_targets
            x, y = to_device(x, device), y.to(device, non_blocking=True)
            # The loss as the doctor reads the task (a sequence's on its positions, as nn.CrossEntropyLoss takes
            # them: (B, T, V) logits would raise in it), the recipe's own where the task says nothing more.
            loss = (doctor.task_loss or loss_fn)(layout.forward(model, x), y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    except torch.OutOfMemoryError as error:
        doctor.error = error  # the report's bigger-machine section says so
    except KeyboardInterrupt:
        stopped_by_user(doctor)
    return final_report(doctor)


def stopped_by_user(doctor: "Doctor | None") -> "Doctor":
    """The doctor of a run Ctrl-C stopped, marked so; Interrupted if there is none or it saw no training step."""
    if doctor is None or doctor.steps == 0:
        raise Interrupted("interrupted (Ctrl-C) before the first training step: nothing to report") from None
    doctor.interrupted()
    return doctor


def final_report(doctor: "Doctor") -> "Report":
    """doctor.report(); a Ctrl-C during its end-of-run measurements (fits, evaluations) raises Interrupted.

    After a Ctrl-C in the loop, the hooks may have been stopped half-way through a step: if the steps so far cannot
    be reported, Interrupted says so in one line rather than blame the loop's code.
    """
    try:
        return doctor.report()
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted (Ctrl-C) while the doctor measured the end of the run, after {doctor.steps} training steps:"
            " no report (--max-steps or --max-seconds cut a run short and still report)"
        ) from None
    except CannotJudge:
        raise
    except Exception as error:
        if doctor.stopped is None or not doctor.stopped.startswith("interrupted"):
            raise
        raise Interrupted(
            f"{doctor.stopped}, inside the doctor's own measuring: the steps so far cannot be reported"
            f" ({type(error).__name__}: {error})"
        ) from None


@dataclass(frozen=True)
class Report:
    """What the doctor found: the verdict, the other failing findings and the warnings, and the bigger-machine check.

    `findings` lists the verdict first (the first failing finding, or `healthy` / `unexplained_failure` when
    none is failing), then the other failing findings in rule order, then the warnings: oddities the run did not
    pay for (analysis/rules.py). `note` says which rules were not judged, and why (on a run whose loss went NaN
    or inf). `places`, set when the run came from a recipe file (doctor/recipe.py), gives per verdict the
    recipe's lines its next step is about. `stopped` says why the run ended before its loop did (a step or time
    budget, Ctrl-C). `ranks`, under torch.distributed, holds the checks across ranks (doctor/distributed.py), whose
    failing findings lead `findings`. A report is a value: `diagnose` builds it, nothing changes it.
    """

    findings: tuple[Finding, ...]
    checklist: Checklist
    steps: int
    measurements: Mapping  # keyed like a grid record's columns
    features: Mapping  # the rules' features, computed from the measurements
    note: str | None = None
    places: Mapping[str, list[str]] = field(default_factory=dict)  # verdict -> recipe lines (doctor.recipe.run)
    # Would longer training help? The training loss carried to 2x and 4x the steps (analysis/forecast.py).
    forecast: Forecast | None = None
    # Would more data help? The quick references refitted on shares of the examples (analysis/data_forecast.py).
    data_forecast: DataForecast | None = None
    cost: Cost | None = None  # what the doctor cost on the loop, and the steps it watched in full
    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    ranks: distributed.Ranks | None = None  # the checks across the ranks of a distributed run (None: one process)
    read_as: str = ""  # what the loss received and what the examples are, as the doctor read them ("": not read)

    @property
    def verdict(self) -> str:
        return self.findings[0].verdict

    @property
    def failing(self) -> list[Finding]:
        """The failing findings, the verdict first (none on a healthy run)."""
        return [f for f in self.findings if f.kind != WARNING and f.verdict != HEALTHY]

    @property
    def warnings(self) -> list[Finding]:
        """Oddities the run did not pay for: listed under the verdict, never the verdict."""
        return [f for f in self.findings if f.kind == WARNING]

    @property
    def headline(self) -> str:
        """The verdict with its warnings counted: 'healthy', 'healthy, 2 warnings', 'dead_relu, 1 warning'."""
        n = len(self.warnings)
        return self.verdict + (f", {n} warning{'s' * (n != 1)}" if n else "")

    def to_dict(self) -> dict:
        """The report as JSON-ready values, in the shape docs/report.schema.json holds (`SCHEMA_VERSION`).

        Each finding carries what its rule judged (analysis/checks/base.py, Finding): the feature, its value, the
        threshold and the direction, and `margin` in one unit for every finding (`MARGIN_UNIT`); null where a
        finding was judged on no threshold (healthy, unexplained_failure) or a value was not measured.
        """
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "steps": self.steps,
            "margin_unit": MARGIN_UNIT,
            "stopped": self.stopped,  # null: the loop ran to its end
            "findings": [_finding_dict(f) for f in self.findings],
            "warnings": len(self.warnings),
            "not_judged": self.note,
            "forecast": None
            if self.forecast is None
            else {
                "metric": "training loss",
                "form": self.forecast.form,
                "now": self.forecast.now,
                "at": [
                    {
                        "steps": steps,
                        "value": value,
                        "plus_minus_90": half,
                        "range_90": list(self.forecast.range_at(steps)),
                    }
                    for steps, (value, half) in self.forecast.at.items()
                ],
            },
            "data_forecast": None
            if self.data_forecast is None
            else {
                "metric": "quick references' held-out accuracy",
                "examples": list(self.data_forecast.examples),
                "accuracies": list(self.data_forecast.accuracies),
                "at_twice_the_examples": self.data_forecast.doubled,
                "gain": self.data_forecast.gain,
            },
            "places": dict(self.places),  # only findings of this report have places
            "bigger_machine": self.checklist.to_dict(),
            "cost": None if self.cost is None else self.cost.to_dict(),
            "ranks": None if self.ranks is None else self.ranks.to_dict(),
            "features": {k: _plain(float(v)) for k, v in self.features.items()},
        }

    def __str__(self) -> str:
        failing, warnings = [f for f in self.findings if f.kind != WARNING], self.warnings
        stopped = f"; {self.stopped}" if self.stopped else ""
        lines = [f"verdict: {self.headline}  (from {self.steps} training steps{stopped})"]
        for i, finding in enumerate(failing, 1):
            lines += self._finding_lines(f"  {i}. ", finding)
        if self.verdict not in (HEALTHY, UNEXPLAINED) and len(failing) == 1 and self.note is None:
            lines.append("  (no other rule fired)")
        elif len(failing) > 1:
            lines.append("  (later findings can follow from the first: fix it and run the doctor again)")
        if self.note is not None:
            lines.append(f"  ({self.note})")
        if self.read_as:
            lines.append(f"read as: {self.read_as}")
        if warnings:
            lines.append("warnings (oddities this run did not pay for; worth a look, not the cause of a failure):")
            for finding in warnings:
                lines += self._finding_lines("  - ", finding)
        if self.forecast is not None:
            lines.append(f"would longer training help? {self.forecast.summary()}")
        if self.data_forecast is not None:
            lines.append(f"would more data help? {self.data_forecast.line()}")
        copy = self.clean_copy_line()
        if copy is not None:
            lines.append(f"what does this model reach in a clean loop? {copy}")
        if self.ranks is not None:
            lines.append(self.ranks.heading())
            lines += [f"  {line.mark} {line.check}: {line.detail}" for line in self.ranks.lines]
        lines.append("is a bigger machine the answer?")
        lines += [f"  {c.mark} {c.check}: {c.detail}" for c in self.checklist.checks]
        lines.append(f"  => {self.checklist.conclusion}")
        if self.cost is not None:
            lines.append(f"the doctor's cost: {self.cost.line()}")
        return "\n".join(lines)

    def clean_copy_line(self) -> str | None:
        """The clean copy of the model against the run, in accuracy (None where no copy was scored on validation).

        Said, not judged: healthy recipes do not all reach a full-batch Adam fit (analysis/rules.py: OutcomeGate), so
        a run short of its copy is a reading to look at, not a verdict, unless the thresholds give the copy a
        tolerance.
        """
        if math.isnan(float(self.features.get("copy_skill", math.nan))):
            return None
        m = self.measurements
        own = m.get("final_val_acc", math.nan)
        return (
            f"a fresh copy from the model factory, fitted in a clean loop (Adam, full batch) on"
            f" {m['capacity_examples']} of the training examples, reaches {m['capacity_val_score']:.0%} on"
            f" {m['capacity_val_examples']} validation examples; this run reached {own:.0%}"
        )

    def _finding_lines(self, bullet: str, finding: Finding) -> list[str]:
        sure = "" if math.isnan(finding.margin) else f"  [{_margin(finding)}]"
        indent = " " * len(bullet)
        lines = [f"{bullet}{finding.verdict}: {finding.evidence}{sure}", f"{indent}next: {finding.next_step}"]
        return lines + [f"{indent}where: {place}" for place in self.places.get(finding.verdict, [])]

    def plot(self, path, thresholds: dict[str, float] | None = None):
        """Write one PNG figure of what the verdict rests on to `path` and return the path (doctor/plot.py).

        One panel per failing finding (its feature against the threshold it was judged with, over the run or at
        the step it was read), gradient norms per parameter and per census, the update-to-weight ratio and the
        data-wait share against the thresholds of the rules that read them (`thresholds`, default: the fitted
        ones of the budget nearest to the run's steps), and last the loss curve and its spikes. matplotlib is
        imported only here.
        """
        from doctor.plot import plot_report

        return plot_report(self, path, thresholds)


# The version of to_dict()'s shape (docs/report.schema.json): raised whenever a field changes meaning or goes.
SCHEMA_VERSION = 1
# The one unit of every finding's JSON `margin` (Finding.past_threshold): the text report's margin is a factor
# for log-scale features and a difference for the others, two units a program would have to tell apart.
MARGIN_UNIT = (
    "the feature's own units past the threshold: value - threshold where the finding fires above it,"
    " threshold - value where it fires below"
)


def _plain(value):
    """A value for JSON: None for NaN (not measured, or not judged)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _finding_dict(finding: Finding) -> dict:
    """One finding as JSON-ready values: what the rule judged, as it judged it (None where it judged no threshold)."""
    return {
        "verdict": finding.verdict,
        "kind": finding.kind,
        "feature": finding.feature,
        "value": _plain(finding.value),
        "threshold": _plain(finding.threshold),
        "direction": finding.direction,
        "margin": _plain(finding.past_threshold),
        "evidence": finding.evidence,
        "next_step": finding.next_step,
    }


def _margin(finding: Finding) -> str:
    rule = next(r for r in RULES if r.verdict == finding.verdict)
    if FEATURES[rule.feature].log:
        return f"{finding.margin:.1f}x past its threshold"
    return f"{finding.margin:+.2f} past its threshold"
