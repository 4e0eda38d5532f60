"""The observer the training loop talks to: a thin composition of the collectors.

`Instruments` builds the shared `Loop` and one collector per measurement, hands each batch and each backward pass
to the collectors that listen for them, and at a snapshot or at the end asks every collector for its columns and
merges them into one record (a column two collectors both produce is a bug: it fails loudly). What each column
means is in the collector that produces it; the hooks are the collectors' own.

The collectors run in the order of `self.collectors`, which matters in three places: the gradient clearing
check reads `.grad` before anything else after backward; the probe grows before the activation census may run
on it; and the data wait is read first at the end, so that the loop's time does not include the measuring.
"""

import time
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from harness.batches import BatchLayout
from harness.instruments.activations import Activations
from harness.instruments.amp import AmpScale
from harness.instruments.budget import Cost, CostBudget
from harness.instruments.causality import Causality
from harness.instruments.census import GradientCensus
from harness.instruments.clearing import GradientClearing
from harness.instruments.clipping import Clipping
from harness.instruments.data_wait import DataWait
from harness.instruments.examples import KeptExamples
from harness.instruments.inputs import InputDependence
from harness.instruments.labels import Labels
from harness.instruments.learning_rate import LearningRate
from harness.instruments.loop import Collector, Loop
from harness.instruments.loss_inputs import LossInputs
from harness.instruments.loss_targets import LossTargets
from harness.instruments.losses import LossCurves
from harness.instruments.modes import Modes
from harness.instruments.nonfinite import NonFiniteWatch
from harness.instruments.optimizer_steps import OptimizerSteps
from harness.instruments.outputs import Outputs
from harness.instruments.padding import Padding
from harness.instruments.probe import Probe
from harness.instruments.update_ratios import UpdateRatios
from harness.targets import TASKS


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
        watch_nonfinite: bool = False,
        budget: CostBudget | None = None,
        pad_id: int | None = None,
    ):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.layout = layout if layout is not None else BatchLayout(model)  # where each batch keeps inputs, targets
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.keep_examples = keep_examples
        self.loop = loop = Loop(model, optimizer, loss_fn, self.layout, self.scaler, census_every)
        # Called with each batch and its split (inputs, targets) before any collector sees it, while set: it returns
        # them as the collectors are to see them (the doctor reads the task of its first batch there, and may read
        # a causal model's targets shifted from then on).
        self.first_look: Callable | None = None
        self.named_params = loop.named_params
        # Under a cost budget (the doctor's; harness/instruments/budget.py) the loop's reads around each optimizer
        # update are timed as the instruments' own, and the budget decides which cycles and censuses are read.
        self.budget = budget
        if budget is not None:
            loop.spend = budget.spend
            loop.census_gate = lambda step: budget.allows(step, self.data_wait.loop_start)
            loop.decide_next = lambda: budget.allows(loop.step + 1, self.data_wait.loop_start)
        self.collectors = self._build_collectors(loop, keep_examples, fresh_gradient, pad_id, watch_nonfinite)
        self._index_listeners()

    def _build_collectors(
        self, loop: Loop, keep_examples: int, fresh_gradient: bool, pad_id: int | None, watch_nonfinite: bool
    ) -> list[Collector]:
        """Every collector, each kept as an attribute by what it collects, in the order they run."""
        # Built in the order they run (see the module docstring); each registers its hooks as it is built.
        self.data_wait = DataWait()
        self.clearing = GradientClearing(loop)
        self.optimizer_steps = OptimizerSteps(loop)
        self.losses = LossCurves(loop)
        self.probe_batch = Probe()
        self.activations = Activations(loop, self.probe_batch)
        self.labels = Labels(loop)
        self.loss_targets = LossTargets(loop)
        self.loss_inputs = LossInputs(loop)
        self.examples = KeptExamples(loop, keep_examples)
        self.census = GradientCensus(loop, fresh_gradient)
        self.learning_rate = LearningRate(loop)
        self.clipping = Clipping(loop)
        self.update_ratios = UpdateRatios(loop, self.census)
        self.amp = AmpScale(loop, self.optimizer_steps)
        self.outputs = Outputs(loop, self.probe_batch)
        self.causality = Causality(loop, self.probe_batch)
        self.input_dependence = InputDependence(loop, self.probe_batch)
        self.modes = Modes(loop)
        # The padding the loss scores: counted by the dataset's pad id (the grid's text), or by a watch the doctor
        # gives it once it knows the task (harness/instruments/padding.py).
        self.padding = Padding(loop, pad_id)
        collectors: list[Collector] = [
            self.data_wait,
            self.clearing,
            self.optimizer_steps,
            self.losses,
            self.probe_batch,
            self.activations,
            self.labels,
            self.loss_targets,
            self.examples,
            self.census,
            self.learning_rate,
            self.clipping,
            self.update_ratios,
            self.amp,
            self.outputs,
            self.causality,
            self.input_dependence,
            self.modes,
            self.padding,
            # Last: its mode, entered as a census step's batch is handed out, then sees none of the others' work.
            self.loss_inputs,
        ]
        # The doctor's watch for the first NaN or inf loss runs last (it may run the forward again); cells leave it off.
        self.nonfinite = NonFiniteWatch(loop) if watch_nonfinite else None
        return collectors + ([self.nonfinite] if self.nonfinite is not None else [])

    def _index_listeners(self) -> None:
        """Which collectors each event calls, on every step and around a census: only those that listen."""
        # Only the collectors that listen for an event are called on it: these run on every step of the loop (on
        # the cycles a cost budget does not watch, only those not SAMPLED).
        self._seeing = [c for c in self.collectors if type(c).see is not Collector.see]
        self._hearing = [c for c in self.collectors if type(c).after_backward is not Collector.after_backward]
        # Not watched, around a census step (the census step, the steps either side, the rest of its cycle):
        self._seeing_census = [c for c in self._seeing if not c.SAMPLED]
        self._hearing_census = [c for c in self._hearing if not c.SAMPLED]
        # and not watched, elsewhere: the loss and its finiteness, the examples kept from the first batches.
        self._seeing_every = [c for c in self._seeing_census if not c.CENSUS_ONLY]
        self._hearing_every = [c for c in self._hearing_census if not c.CENSUS_ONLY]

    # ----- where the loop is, for the training loop, the doctor and the tests -----------------------------------
    @property
    def step(self) -> int:
        """Index of the step whose backward was seen last (-1 before the first)."""
        return self.loop.step

    @property
    def last_inputs(self):
        """The last batch's inputs (a tensor, or a tuple or dict of them), as the layout takes them."""
        return self.loop.last_inputs

    @property
    def last_targets(self) -> torch.Tensor | None:
        return self.loop.last_targets

    @property
    def probe(self):
        """The probe batch's inputs (harness/instruments/probe.py); None until the first batch is seen."""
        return self.probe_batch.inputs

    @property
    def kept_at_step(self) -> list[float]:
        """Per measured optimizer step: the gradient's norm at the step over its norm after backward."""
        return self.clipping.kept_at_step

    @property
    def forwards(self) -> dict[str, int]:
        """The loop's training and evaluation forwards, and those in the other mode (models with modes only)."""
        return self.modes.forwards

    @property
    def cost(self) -> Cost | None:
        """What the instruments cost on this run so far, under a cost budget (None without one)."""
        if self.budget is None:
            return None
        return self.budget.cost(self.loop.step + 1, self.data_wait.loop_start)

    @property
    def checked_steps(self) -> int:
        """Optimizer steps whose gradient clearing was read."""
        return self.clearing.checked_steps

    def is_census_step(self, step: int) -> bool:
        return self.loop.is_census_step(step)

    def task_read(self, kind: str) -> None:
        """The task, where the caller has read it already (the doctor, at its first batch): it is read once.

        The first training forward then names only the loss. `kind`: one of harness.targets.TASKS.
        """
        if kind not in TASKS:
            raise ValueError(f"unknown task {kind!r}: choose {', '.join(TASKS)}")
        self.loop.task = kind

    # ----- the loop's events ------------------------------------------------------------------------------------
    def watch(self, batches: Iterable, then: Callable[[], None] | None = None) -> Iterator:
        """Yield the batches of `batches`, timing how long the loop waits for each one; `then()` after each is seen."""
        try:
            for batch, waited_s in self.data_wait.timed(batches):
                self.see(batch, waited_s, then)
                yield batch
        finally:  # a loop that breaks or raises mid-step: the loss's mode is left (harness/instruments/loss_inputs.py)
            self.loss_inputs.leave()

    def see(self, batch, waited_s: float = 0.0, then: Callable[[], None] | None = None) -> None:
        """One batch the loop is about to train on, and how long it waited for it.

        `watch` calls it for each batch it yields; a loop the instruments do not iterate (a framework's callbacks)
        calls it itself, before the batch's forward pass. `then()` runs after, its time counted as the instruments'.
        """
        start = time.perf_counter()
        try:
            self._see(batch, waited_s)
        except BaseException:  # a batch refused: no step follows, and no mode may be left entered
            self.loss_inputs.leave()
            raise
        if then is not None:
            then()
        if self.budget is not None:
            self.budget.spend(start)

    def _see(self, batch, waited_s: float) -> None:
        self.data_wait.add(waited_s)  # before the batch is read: a batch the layout refuses was still waited for
        inputs, targets = self.layout.split(batch)
        if self.first_look is not None:
            inputs, targets = self.first_look(batch, inputs, targets)
        self.loop.last_inputs, self.loop.last_targets = inputs, targets
        for collector in self._told(self._seeing, self._seeing_census, self._seeing_every):
            collector.see(inputs, targets)

    def _told(self, everyone: list, around_census: list, every_step: list) -> list:
        """Who hears of this event: all on a watched cycle; else those not sampled, around a census; else fewer."""
        loop = self.loop
        if loop.watching:
            return everyone
        if loop.census_now or loop.census_next or loop.census_cycle:
            return around_census
        return every_step

    def after_backward(self, loss: torch.Tensor) -> None:
        """Call once per step, after `loss.backward()` and before `optimizer.step()`."""
        start = time.perf_counter()
        loop = self.loop
        loop.advance()
        loop.census_cycle |= loop.census_now  # its later backward passes too: with accumulation the last counts
        for collector in self._told(self._hearing, self._hearing_census, self._hearing_every):
            collector.after_backward(loss)
        if self.budget is not None:
            self.budget.watched_steps += loop.watching
            self.budget.spend(start)
            if loop.step == 0:
                self.budget.start_s = self.budget.spent_s  # the first step's one-off work: reported, not rationed

    def log_validation(self, step: int, loss: float, accuracy: float) -> None:
        self.losses.log_validation(step, loss, accuracy)

    # ----- the measurements ------------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The scalar measurements of the loop so far, as if it stopped now; the hooks stay in place."""
        return self._measure(final=False)

    def finish(self) -> dict:
        """Remove the hooks and return every measurement, keyed by record column."""
        for collector in self.collectors:
            collector.close()
        self.loop.watching = True  # what is measured after the loop (the evaluations) is the instruments' own
        return self._measure(final=True)

    def _measure(self, final: bool) -> dict:
        measured: dict = {}
        measured_by: dict[str, Collector] = {}
        for collector in self.collectors:
            for name, value in collector.columns(final).items():
                if name in measured_by:
                    raise RuntimeError(
                        f"column {name!r} is measured by both {type(measured_by[name]).__name__} and"
                        f" {type(collector).__name__}"
                    )
                measured[name], measured_by[name] = value, collector
        return measured

    def kept_examples(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The distinct training examples among the first the loop was fed, inputs flattened to rows, in order.

        A small training set comes round again every epoch: each example counts once. Targets are class indices;
        None if none was kept or the task has no classes (multi-label, regression: no reference fit).
        """
        return self.examples.examples()


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
