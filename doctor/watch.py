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

This module holds the watch, `Doctor`. Its options are checked once in doctor/options.py, what it measures once the
loop has ended is doctor/after_the_loop.py, the task's reading at the first batch doctor/task_reading.py, the
judging of the finished run (`Observed`, doctor/observed.py) doctor/diagnosis.py, the `Report` and its text and
JSON doctor/report.py, `probe` doctor/probe_loop.py, and `CannotJudge` with the other refusals doctor/refusals.py.
"""

import functools
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType

import torch
from torch import nn

from doctor import distributed
from doctor.after_the_loop import COUNTED_SEQUENCES, RECENT_EXAMPLES, AfterTheLoop, batch_size
from doctor.diagnosis import diagnose
from doctor.machine import memory_line
from doctor.observed import NO_VALIDATION, Observed
from doctor.options import DoctorOptions
from doctor.random_streams import OwnReading, streams_kept
from doctor.refusals import TaskFromLoss, UnsupportedTask, refusing, require_parameters
from doctor.report import Report
from doctor.task_reading import ShiftInTheLoop, causal_shift, check_task
from doctor.validation_reads import ValidationReads
from harness.batches import BatchLayout
from harness.instruments import CAPACITY_EXAMPLES, Instruments
from harness.instruments.budget import REPORT_SHARE, SHARE, CostBudget, ReportBudget
from harness.instruments.memorization import CAPACITY_STEPS, MEMORIZE_STEPS
from harness.instruments.padding import PaddingWatch
from harness.instruments.probe import FirstLayer
from harness.instruments.ranks import RankWatch
from harness.targets import Task, TaskError, read_task, shifted


class Doctor(AfterTheLoop):
    """Watches one training loop. See the module docstring for the three lines.

    Its options are `self.options` (doctor/options.py); what it measures once the loop has ended is its base class's
    (doctor/after_the_loop.py). The class attributes below are the run's readings before the watch reads them.
    """

    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    input_scale = ""  # why the input scale was not measured ("" when it was, or means nothing: token ids)
    _started: float | None = None  # when the watch first asked for a batch: the time budget runs from there
    task: Task | None = None  # read once, from the first batch (check_task)
    # A causal model's shift, read at the first batch (causal_shift): 1 where the model scores the output at t
    # against the label at t + 1, and the doctor then reads every batch's targets shifted (BatchLayout).
    shift = 0
    padding: PaddingWatch | None = None  # a sequence task's watch for padding scored by the loss
    _first: FirstLayer | None = None  # what the model's first layer saw on the first batch, until read
    _shift_check: ShiftInTheLoop | None = None  # a sequence read unshifted: the first step's loss, checked
    _unread: TaskFromLoss | None = None  # a task to read at the first step, from what the loss received
    # Why the doctor's own evaluations are not run ("" where they are): the loss reads a prediction that
    # forward()'s output does not give (a decoder in the step), so no evaluation of the doctor's would be the run's.
    own_evaluations = ""
    rows_are_positions = False  # the loss's rows are positions of a (time, batch) output the loop flattened
    val_start: tuple[float, float] | None = None  # validation's (loss, score) before the first step, the baseline
    error: BaseException | None = None  # what ended the loop early, for the report (out of memory: a bigger machine?)
    _observed: Observed | None = None  # set by finish(): the watch is over
    _report: Report | None = None  # report() with the fitted thresholds, kept

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
        require_parameters(model)
        self.options = DoctorOptions(  # ValueError for an option out of range, before any hook is on the model
            validation=validation,
            model_factory=model_factory,
            census_every=census_every,
            keep_batches=keep_batches,
            memorize_steps=memorize_steps,
            capacity_examples=capacity_examples,
            capacity_steps=capacity_steps,
            scaler=scaler,
            inputs=inputs,
            targets=targets,
            output=output,
            budget=budget,
            max_steps=max_steps,
            max_seconds=max_seconds,
            report_budget=report_budget,
        )
        with refusing():  # where each batch keeps its inputs and targets (harness/batches.py); None: read from it
            self.layout = BatchLayout(model, inputs=inputs, targets=targets, output=output)
        # Read through OwnReading: iterating a DataLoader draws its seed from the run's random stream.
        self.validation = OwnReading(validation) if validation is not None else None
        self._instrument(optimizer)
        # The last training batches, to measure training accuracy on: at least `keep_batches` of them and at least
        # RECENT_EXAMPLES examples (with a batch of 1, eight examples would make a coin of the accuracy); with a
        # model factory, as many as the capacity fit takes.
        self.recent: deque = deque()
        self._recent_examples, self._keep_examples = 0, max(RECENT_EXAMPLES, self.options.capacity_fit_examples)
        # The loss as the doctor calls it on the model's output: the loop's own, called on a sequence's positions
        # the way the loop calls it (harness/targets.py: PositionLoss); set with the task.
        self.task_loss: Callable | None = loss_fn
        self.instruments.first_look = self._first_look  # the first batch is read before the instruments see it

    def _instrument(self, optimizer: torch.optim.Optimizer) -> None:
        """Put the instruments on the loop (hooks on the model and the optimizer), and the watches that go with them."""
        options = self.options
        self.instruments = Instruments(
            self.model,
            optimizer,
            self.loss_fn,
            options.census_every,
            scaler=options.scaler,  # .grad read divided by its scale
            layout=self.layout,
            fresh_gradient=False,
            watch_nonfinite=True,  # any NaN or inf loss, and where it began (harness/instruments/nonfinite.py)
            budget=options.budget,  # at most this share of the loop's own time (None: every step, whatever it costs)
        )
        self.nonfinite = self.instruments.nonfinite
        # Validation read while the run trains, thinning out as it grows and within the budget: whether the run was
        # still learning when it stopped is read on validation where it was read often enough late in the run.
        self.val_reads = ValidationReads(self.instruments.budget) if self.validation is not None else None
        # Under torch.distributed, this rank's own evidence for the checks across ranks (doctor/distributed.py),
        # gathered once at the report: nothing is exchanged while the loop trains.
        rank = distributed.world()
        self.ranks = RankWatch(self.model, optimizer, *rank, scaler=options.scaler) if rank is not None else None
        # The wait for data as the loop would show it on an idle host: the OS's pauses counted in neither the waits
        # nor the loop's time (harness/instruments/data_wait.py); the grid's cells keep the wall clock.
        self.instruments.data_wait.exclude_host_pauses = True

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
        if self.options.max_steps is not None or self.options.max_seconds is not None:
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
        max_steps, max_seconds = self.options.max_steps, self.options.max_seconds
        iterator = iter(batches)
        while True:
            if max_steps is not None and self.steps >= max_steps:
                self.stopped = f"cut at the step budget, max_steps={max_steps}"
                return
            if max_seconds is not None and time.perf_counter() - self._started >= max_seconds:
                self.stopped = f"cut at the time budget, max_seconds={max_seconds:g}"
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
        self._recent_examples += batch_size(targets)
        while (
            len(self.recent) > self.options.keep_batches
            and self._recent_examples - batch_size(self.recent[0][1]) >= self._keep_examples
        ):
            self._recent_examples -= batch_size(self.recent.popleft()[1])

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

    def finish(self) -> Observed:
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
                cut_at_report=MappingProxyType(dict(self.options.report_budget.cut)),
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

    def report(self, thresholds: dict[str, float] | None = None) -> Report:
        """finish() the watch and diagnose() the run: the verdict, the findings, and the bigger-machine check.

        Without `thresholds`, those fitted for the step budget nearest to the run's steps (the report is kept).
        """
        if thresholds is not None:
            return diagnose(self.finish(), thresholds)
        if self._report is None:
            self._report = diagnose(self.finish())
        return self._report


def _rows_of(tensor: torch.Tensor, tail: tuple[int, ...]) -> torch.Tensor:
    """A tensor reshaped to rows of `tail`, as the loop reshapes it before its loss (`output.view(-1, ntokens)`)."""
    return tensor.reshape(-1, *tail)
