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
A NaN or inf training loss is a finding of its own that comes first (doctor/nonfinite.py). Nothing here knows
what fault, if any, is planted.

The task is read from the first batch's targets and the model's output (harness/targets.py): class indices
with (batch, C) outputs, one-hot rows, binary targets with one output unit, multi-label rows, or regression
targets shaped like the output. What the doctor cannot judge it refuses with `CannotJudge` (UnsupportedTask for
a batch, model or task it does not cover): batches must be (inputs, targets) pairs of tensors, the model called
as model(inputs), the targets one of those tasks. Exceptions raised by the user's own model, loss or data code
pass through unchanged.
"""

import inspect
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from analysis.features import FEATURES, features
from analysis.rules import HEALTHY, RULES, Finding, diagnose, load_thresholds
from doctor.machine import bigger_machine
from doctor.nonfinite import NEXT_STEPS, READS_TRAINED_ACCURACY, VERDICT, NonFiniteWatch
from harness.evaluation import evaluate
from harness.instruments import Instruments, example_rows, memorize
from harness.reference import EMPTY as REFERENCE_EMPTY
from harness.reference import reference_fit
from harness.targets import TaskError, class_labels, task_of


class CannotJudge(Exception):
    """The doctor cannot judge this run (the command line's exit status 2); the message says why, in one line."""


class UnsupportedTask(CannotJudge, ValueError):
    """The batches, model or task are not the ones the doctor covers: its rules would give a wrong verdict."""


RECENT_EXAMPLES = 256  # training accuracy is measured on at least this many of the last examples trained on
PAIRS = "the doctor supports batches that are (inputs, targets) pairs of tensors"


class Doctor:
    """Watches one training loop. See the module docstring for the three lines."""

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
        memorize_steps: int = 300,
        scaler: "torch.amp.GradScaler | None" = None,
    ):
        self.model, self.loss_fn, self.batches = model, loss_fn, batches
        self.memorize_steps = memorize_steps  # per rate, on a fresh model from model_factory (3 rates)
        self.validation, self.model_factory = validation, model_factory
        # With mixed precision the loop's GradScaler: .grad holds gradients times its scale until unscale_.
        self.instruments = Instruments(model, optimizer, loss_fn, census_every, scaler=scaler)
        self.nonfinite = NonFiniteWatch(model, self.instruments.named_params)
        # The last training batches, to measure training accuracy on: at least `keep_batches` of them and at least
        # RECENT_EXAMPLES examples (with a batch of 1, eight examples would make a coin of the accuracy).
        self.recent: deque = deque()
        self.keep_batches, self._recent_examples = keep_batches, 0
        self.n_classes: int | None = None
        self.task: str | None = None
        self.uninformed_loss = math.nan  # the loss of a guess that ignores the inputs (ln C for classes)
        self.val_start: tuple[float, float] | None = None
        self.error: BaseException | None = None
        self.unmemorized = "no model factory given"  # why memorization was not measured, if it was not
        self.memorized_on = 0  # examples memorization fitted
        self._report = None

    def __iter__(self) -> Iterator:
        if self.batches is None:
            raise TypeError(
                "give Doctor the batches (Doctor(model, optimizer, loss_fn, loader)) or use doctor.watch(loader)"
            )
        return self.watch(self.batches)

    def watch(self, batches: Iterable) -> Iterator:
        """Yield the batches, timing the wait for each; each is checked for its shape, the first for the task."""
        for batch in self.instruments.watch(checked(batches, "training")):
            if self.n_classes is None:
                self.task, self.n_classes, self.uninformed_loss = check_task(self.model, batch)
                if self.validation is not None:
                    self.val_start = evaluate(
                        self.model, self.loss_fn, checked(self.validation, "validation"), task=self.task
                    )
            self._remember(batch)
            yield batch

    def _remember(self, batch) -> None:
        self.recent.append(batch)
        self._recent_examples += len(batch[1])
        while (
            len(self.recent) > self.keep_batches and self._recent_examples - len(self.recent[0][1]) >= RECENT_EXAMPLES
        ):
            self._recent_examples -= len(self.recent.popleft()[1])

    def after_backward(self, loss: torch.Tensor) -> None:
        """Call once per step, after loss.backward() and before optimizer.step()."""
        self.instruments.after_backward(loss)
        batch = self.recent[-1] if self.recent else None
        self.nonfinite.after_backward(self.instruments.step, loss, batch, self.instruments)

    @property
    def steps(self) -> int:
        return self.instruments.step + 1

    def measurements(self) -> dict:
        """Everything measured, keyed like the grid's record columns (NaN where it could not be measured)."""
        if self.n_classes is None:
            raise CannotJudge("the doctor saw no batch: wrap the loop's batches with the doctor (doctor.watch(loader))")
        if self.instruments.step < 0:
            raise CannotJudge(
                "the doctor saw no training step: call doctor.after_backward(loss) once per step, after loss.backward()"
            )
        measured = self.instruments.finish()
        if self.instruments.scaler is None:
            _no_hidden_scaler(self.instruments.kept_at_step)
        train_loss, train_acc = evaluate(self.model, self.loss_fn, list(self.recent), task=self.task)
        val_loss, val_acc = (
            evaluate(self.model, self.loss_fn, checked(self.validation, "validation"), task=self.task)
            if self.validation is not None
            else (math.nan, math.nan)
        )
        memorized = {
            "memorize_rates": [],
            "memorize_losses": [],
            "memorize_best_loss": math.nan,
            "memorize_best_rate": math.nan,
        }
        if self.model_factory is not None and self.instruments.probe is not None:
            x, y = _first_examples(self.recent, 16)
            if x.is_floating_point():  # NaN or inf examples cannot be fitted: leave them out, say so if none is left
                finite = torch.isfinite(x.reshape(len(x), -1)).all(dim=1)
                x, y = x[finite], y[finite]
            device = next(self.model.parameters()).device
            x, y = x.to(device), y.to(device)
            self.memorized_on = len(y)
            if len(y):
                memorized = memorize(self.model_factory, x, y, self.loss_fn, steps=self.memorize_steps)
            else:
                self.unmemorized = "every example it would fit holds NaN or inf"
        kept = self.instruments.kept_examples()
        held = (
            _examples(checked(self.validation, "validation"), self.instruments.keep_examples, self.task)
            if self.validation is not None
            else None
        )
        reference = reference_fit(*kept, *(held or (None, None))) if kept is not None else dict(REFERENCE_EMPTY)
        return {
            **measured,
            **memorized,
            **reference,
            "n_classes": self.n_classes,
            "ln_classes": self.uninformed_loss,
            "final_train_loss": train_loss,
            "final_train_acc": train_acc,
            "final_val_loss": val_loss,
            "final_val_acc": val_acc,
        }

    def report(self, thresholds: dict[str, float] | None = None) -> "Report":
        """The verdict, every rule that fired with its evidence, the next step, and the bigger-machine check."""
        if self._report is None:
            measured = self.measurements()
            thresholds = load_thresholds(self.steps) if thresholds is None else thresholds
            findings, note = diagnose(measured, RULES, thresholds), None
            origin = self.nonfinite.origin
            if origin is not None:
                # Any NaN or inf training loss is the verdict; the fitted rules come after it, judged only where
                # their measurements can still mean something.
                evidence = self.nonfinite.evidence(self.steps, measured["nonfinite_losses"])
                first = Finding(VERDICT, evidence, f"look at {NEXT_STEPS[origin.what]}", math.nan)
                fitted = [f for f in findings if f.verdict != HEALTHY]
                if origin.from_the_start:
                    note = (
                        f"no fitted rule was judged: the {origin.what.split()[0]} were non-finite from the first step,"
                        " and every measurement the rules read saw them"
                    )
                    fitted = []
                else:
                    fitted = [f for f in fitted if f.verdict not in READS_TRAINED_ACCURACY]
                    note = "not judged on a non-finite run, as they read the trained model's accuracy: " + ", ".join(
                        READS_TRAINED_ACCURACY
                    )
                findings = [first, *fitted]
            skipped = measured["amp_skipped_share"]
            if origin is None and skipped > SKIPPED_MOST:
                findings = [_skipped_steps(measured), *(f for f in findings if f.verdict != HEALTHY)]
            device = next(self.model.parameters()).device
            starved = thresholds["starved_loader"]
            checklist = bigger_machine(
                measured,
                findings,
                self.val_start,
                device,
                self.error,
                starved,
                unmemorized=self.unmemorized,
                memorized_on=self.memorized_on,
            )
            self._report = Report(findings, checklist, self.steps, measured, features(measured), note)
        return self._report


SKIPPED = "amp_steps_skipped"
SKIPPED_MOST = 0.5  # by definition, not fitted: a run whose GradScaler skipped most steps barely trained


def _skipped_steps(measured: Mapping) -> Finding:
    """The GradScaler skipped most optimizer steps: gradients inf or NaN while the loss stayed finite.

    A scaler halves its scale at each skipped step and grows it again only after 2000 clean ones, so a scale
    collapsing toward zero is the same finding. Without a scaler the same gradients would make the weights NaN
    (nonfinite_loss); with one the run goes on quietly, learning nothing.
    """
    evidence = (
        f"the GradScaler skipped {measured['amp_skipped_share']:.0%} of optimizer steps because their gradients held"
        f" inf or NaN, though the loss was finite; its scale fell to {measured['amp_scale_min']:.2g} (it starts at"
        " 65536 and halves at each skipped step)"
    )
    return Finding(SKIPPED, evidence, f"look at {NEXT_STEPS['gradients']}", math.nan)


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


def _first_examples(batches: Iterable, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` (inputs, targets) of these batches, joined (batches shaped unlike the first are skipped)."""
    xs, ys, have = [], [], 0
    for x, y in batches:
        if xs and (x.shape[1:] != xs[0].shape[1:] or y.shape[1:] != ys[0].shape[1:]):
            continue
        xs.append(x[: n - have])
        ys.append(y[: n - have])
        have += len(xs[-1])
        if have >= n:
            break
    return torch.cat(xs), torch.cat(ys)


def _examples(batches: Iterable, limit: int, task: str | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Up to `limit` (inputs, class labels) of a validation iterable, inputs flattened to rows, on the CPU.

    None when the task has no class labels (multi-label, regression) or a batch is not one input tensor.
    """
    xs, ys, n = [], [], 0
    for batch in batches:
        rows = example_rows(batch, limit - n)
        labels = class_labels(rows[1], task) if rows is not None else None
        if labels is None:
            return None
        xs.append(rows[0])
        ys.append(labels)
        n += len(rows[1])
        if n >= limit:
            break
    return (torch.cat(xs), torch.cat(ys)) if xs else None


def checked(batches: Iterable, where: str) -> Iterator:
    """The batches, each checked to be an (inputs, targets) pair of tensors (UnsupportedTask if one is not)."""
    for batch in batches:
        if not (
            isinstance(batch, tuple | list)
            and len(batch) == 2
            and torch.is_tensor(batch[0])
            and torch.is_tensor(batch[1])
        ):
            raise UnsupportedTask(batch_problem(batch, where))
        yield batch


def batch_problem(batch, where: str) -> str:
    """Why `batch` is not an (inputs, targets) pair of tensors, in one line naming what is supported."""

    def kinds(items) -> str:
        return ", ".join(type(item).__name__ for item in items)

    if isinstance(batch, Mapping):
        keys = ", ".join(repr(k) for k in list(batch)[:6])
        return f"a {where} batch is a {type(batch).__name__} (keys {keys}): {PAIRS}; dict batches are not supported yet"
    if not isinstance(batch, tuple | list):
        return f"a {where} batch is a {type(batch).__name__}, not a pair: {PAIRS}"
    if len(batch) != 2:
        return (
            f"a {where} batch has {len(batch)} items ({kinds(batch)}): {PAIRS}; several inputs per batch (or items"
            " beside inputs and targets) are not supported yet"
        )
    inputs = batch[0]
    if isinstance(inputs, tuple | list | Mapping):
        return (
            f"the inputs of a {where} batch are a {type(inputs).__name__} of {len(inputs)} ({kinds(inputs)}): {PAIRS};"
            " several inputs per example are not supported yet"
        )
    return f"a {where} batch is ({kinds(batch)}): {PAIRS}"


def _required_inputs(model: nn.Module) -> list[str]:
    """The names of the positional arguments the model's forward requires (empty if its signature hides them)."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in positional and p.default is inspect.Parameter.empty]


def check_task(model: nn.Module, batch) -> tuple[str, int, float]:
    """The task of the first batch (harness/targets.py), its classes (or outputs), and an uninformed guess's loss.

    The uninformed loss: ln C for classes, ln 2 per binary target, the targets' variance for regression.

    UnsupportedTask if the model takes several inputs or its output and the targets make no task the doctor covers.
    `batch` is an (inputs, targets) pair of tensors: `checked` has made sure of that before the batch gets here.
    """
    required = _required_inputs(model)
    if len(required) > 1:
        raise UnsupportedTask(
            f"the model's forward takes {len(required)} inputs ({', '.join(required)}): {PAIRS}, the model called"
            " as model(inputs); models of several inputs are not supported yet"
        )
    x, y = batch[0], batch[1]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(x.to(next(model.parameters()).device))
    model.train(was_training)
    if not torch.is_tensor(out):
        raise UnsupportedTask(f"the model returned a {type(out).__name__}: the doctor reads one output tensor")
    try:
        task = task_of(y, out)
    except TaskError as error:
        raise UnsupportedTask(str(error)) from None
    if task in ("multiclass", "onehot"):
        return task, int(out.shape[1]), math.log(out.shape[1])
    if task in ("binary", "multilabel"):
        return task, 2 if task == "binary" else int(out[0].numel()), math.log(2)
    return task, int(out[0].numel()), float(y.detach().double().var()) if y.numel() > 1 else math.nan


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
) -> "Report":
    """Run a short standard training loop on the recipe's pieces under the doctor and return its report."""
    torch.manual_seed(seed)
    device = torch.device(device)
    model = model_factory().to(device)
    optimizer = optimizer_factory(model.parameters())
    doctor = Doctor(model, optimizer, loss_fn, validation=validation, model_factory=model_factory)
    model.train()
    try:
        for _step, (x, y) in zip(range(steps), doctor.watch(cycle(batches)), strict=False):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    except torch.OutOfMemoryError as error:
        doctor.error = error  # the report's bigger-machine section says so
    return doctor.report()


class Report:
    """What the doctor found: findings in rule order (the first is the verdict) and the bigger-machine check.

    `note` says which rules were not judged, and why (on a run whose loss went NaN or inf).
    """

    def __init__(
        self,
        findings: list[Finding],
        checklist: list,
        steps: int,
        measurements: dict,
        feature_values: dict,
        note: str | None = None,
    ):
        self.findings, self.checklist, self.steps = findings, checklist, steps
        self.measurements, self.features, self.note = measurements, feature_values, note

    @property
    def verdict(self) -> str:
        return self.findings[0].verdict

    def to_dict(self) -> dict:
        def plain(value):
            return None if isinstance(value, float) and math.isnan(value) else value

        return {
            "verdict": self.verdict,
            "steps": self.steps,
            "findings": [
                {"verdict": f.verdict, "evidence": f.evidence, "next_step": f.next_step, "margin": plain(f.margin)}
                for f in self.findings
            ],
            "not_judged": self.note,
            "bigger_machine": [{"check": c.check, "ok": c.ok, "detail": c.detail} for c in self.checklist],
            "features": {k: plain(float(v)) for k, v in self.features.items()},
        }

    def __str__(self) -> str:
        first = self.findings[0]
        lines = [f"verdict: {self.verdict}  (from {self.steps} training steps)"]
        for i, finding in enumerate(self.findings, 1):
            sure = "" if math.isnan(finding.margin) else f"  [{_margin(finding)}]"
            lines += [f"  {i}. {finding.verdict}: {finding.evidence}{sure}", f"     next: {finding.next_step}"]
        if first.verdict != "healthy" and len(self.findings) == 1 and self.note is None:
            lines.append("  (no other rule fired)")
        elif len(self.findings) > 1:
            lines.append("  (later findings can follow from the first: fix it and run the doctor again)")
        if self.note is not None:
            lines.append(f"  ({self.note})")
        lines.append("is a bigger machine the answer?")
        lines += [f"  [{'yes' if c.ok else 'no '}] {c.check}: {c.detail}" for c in self.checklist[:-1]]
        lines.append(f"  => {self.checklist[-1].detail}")
        return "\n".join(lines)


def _margin(finding: Finding) -> str:
    rule = next(r for r in RULES if r.verdict == finding.verdict)
    if FEATURES[rule.feature].log:
        return f"{finding.margin:.1f}x past its threshold"
    return f"{finding.margin:+.2f} past its threshold"
