"""What the Doctor measures once the watched loop has ended: `AfterTheLoop`, a base class of doctor.watch.Doctor.

The final losses and scores, memorization and the capacity fit on fresh models, the quick references' examples,
a sequence's yardsticks and padding scored by the loss: everything of a grid record that a loop's hooks cannot
read while it trains, measured within the report's time budget (harness/after_training.py runs the fits, as for
the grid's cells). Apart from the watch (doctor/watch.py), which is the user's half of the Doctor: this half reads
the state the watch kept (the task, the last batches, the instruments) and is called once, by finish().
"""

import dataclasses
import math
import time
from collections import deque
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np
import torch

from doctor.refusals import CannotJudge
from harness.after_training import MEMORIZATION, Probes, end_of_run, run_record
from harness.batches import BatchLayout, apply, floats, head, join, rows, same_shape, to_device
from harness.evaluation import evaluate
from harness.instruments import CAPACITY_EXAMPLES, example_rows
from harness.instruments.budget import Cost, ReportBudget
from harness.instruments.causality import next_token_input
from harness.targets import class_labels, in_classes
from harness.text import pair_count_losses

COUNTED_SEQUENCES = CAPACITY_EXAMPLES  # a next-token run's last sequences whose tokens are counted
NO_TOKEN_COUNTS = {"lm_unigram_val_loss": math.nan, "lm_bigram_val_loss": math.nan, "lm_counts_val_se": math.nan}
RECENT_EXAMPLES = 256  # training accuracy is measured on at least this many of the last examples trained on
# The validation reads' columns (harness/instruments/losses.py)
VAL_CURVE = ("val_steps", "val_loss_curve", "val_acc_curve")


def batch_size(targets: torch.Tensor) -> int:
    """Examples in a batch's targets (shape[0]: len() of a tensor costs more, and this runs every step)."""
    return targets.shape[0] if targets.dim() else 1


class AfterTheLoop:
    """The Doctor's measurements after its loop: `_measurements()`, every record column the watch could not read.

    A base class, not a Doctor of its own: it reads what the watch (doctor/watch.py) set up and kept, and sets the
    four readings below, which finish() puts in the `Observed`.
    """

    examples_not_rows = ""  # why the examples are not rows of the inputs ("" when they are), decided once per run
    unmemorized = "no model factory given"  # why memorization was not measured, if it was not
    memorized_on = 0  # examples memorization fitted
    cost: Cost | None = None  # what the instruments cost on the loop, read as it ends (None: no budget)

    def _evaluate(self, batches: Iterable, split: bool = True) -> tuple[float, float]:
        """Loss and score on batches as the loop's (split=True) or on (inputs, targets) pairs already split."""
        layout = self.layout if split else self.layout.already_split()
        return evaluate(self.model, self.task_loss, batches, task=self.task.kind, layout=layout)

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
        budget = self.options.report_budget
        budget.start(self.cost.loop_s if self.cost is not None else self._loop_s())
        with budget.timed("last readings"):
            measured = self.instruments.finish()
            if self.instruments.scaler is None:
                _no_hidden_scaler(self.instruments.kept_at_step)
        with budget.timed("evaluations"):
            scores = self._final_scores(measured)
        options = self.options
        probes = Probes(
            memorize_steps=options.memorize_steps, capacity_steps=options.capacity_steps, forward=self.layout.forward
        )
        after = self._fits(probes, budget)
        record = run_record(measured, scores, after, self.task.n_classes, self.task.uninformed_loss)
        self._task_measurements(record, budget)
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

    def _final_scores(self, measured: dict) -> dict[str, float]:
        """The trained model's losses and scores as the run ends, on its last training batches and on validation.

        Validation's are also the last point of the run's validation curve in `measured`.
        """
        if self.own_evaluations:  # the doctor cannot compute the loop's prediction: the loop's training loss only
            train_loss, train_acc = _last_losses(measured.get("train_loss_curve")), math.nan
            val_loss = val_acc = math.nan
        else:
            train_loss, train_acc = self._evaluate(_last_batches(self.recent, self.options.keep_batches), split=False)
            val_loss, val_acc = self._evaluate(self.validation) if self.validation is not None else (math.nan,) * 2
            if self.validation is not None:  # the curve ends where the run did, as a cell's (harness/cell.py)
                for column, value in zip(VAL_CURVE, (self.steps, val_loss, val_acc), strict=True):
                    measured[column] = [*measured[column], value]
        return {
            "final_train_loss": train_loss,
            "final_train_acc": train_acc,
            "final_val_loss": val_loss,
            "final_val_acc": val_acc,
        }

    def _fits(self, probes: Probes, budget: ReportBudget) -> dict:
        """Memorization, the capacity fit and the quick references, on fresh models and the run's own examples."""
        # Memorization and the capacity fit take examples by the inputs' first dimension; a loop whose inputs keep
        # the batch elsewhere (sequence first, (T, B, ...)) has no example rows to take: neither is measured.
        # Decided once for the run: the first batches' (the instruments keep examples from them), else the last's.
        not_rows = self.own_evaluations or self.instruments.examples.not_rows or _not_example_rows(self.recent)
        self.examples_not_rows = not_rows
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
        after = end_of_run(self.options.model_factory, self.task_loss, probes, *examples, budget=budget)
        if MEMORIZATION in budget.cut:
            self.unmemorized = f"cut at the report's time budget, {budget.cut[MEMORIZATION]}"
        return after

    def _task_measurements(self, record: dict, budget: ReportBudget) -> None:
        """The columns only some tasks have, added to `record`: a sequence's yardsticks and shift, padding's."""
        if self.task.kind == "sequence":  # no reference fit measured it: held against validation, not the training mix
            with budget.timed("sequence yardsticks"):
                record.update(self._sequence_yardsticks())  # the class prior, and what counting tokens reaches
            record["target_shift"] = self.shift  # the doctor's own (no record column): the causal shift it read
        if self.padding is not None:  # the labels under padding tried on the loss, which the collector cannot call
            with budget.timed("padding"):
                record.update(self.padding.measurements(self.recent, self.task_loss))

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
        (analysis/outcome_gate.py), from the user's own tokens. NaN where the doctor cannot run its own
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
        if not_rows and self.options.model_factory is not None:
            self.unmemorized = not_rows
        if self.options.model_factory is None or self.instruments.probe is None or not_rows:
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
        pairs = _finite_pairs(self.recent, self.options.capacity_fit_examples) if not not_rows else []
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
        n = self.options.capacity_fit_examples
        if self.validation is None or not_rows or not n or self.options.model_factory is None:
            return None
        if not self._capacity_read():  # no capacity fit: its validation examples are not read either
            return None
        pairs = _finite_pairs(_first_of(self.validation, self.layout, n), n)
        return [(to_device(x, self._device), y.to(self._device)) for x, y in pairs] or None

    def _held_out(self) -> tuple | None:
        """The validation examples the references are scored on (None without validation, or for a sequence)."""
        if self.validation is None or self.task.kind == "sequence":  # a label per position: no reference fit
            return None
        classes = self.task.n_classes if self.task.kind == "multiclass" else None
        return _examples(self.validation, self.layout, self.instruments.keep_examples, self.task.kind, classes)


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
        examples += batch_size(y)
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
        have += batch_size(kept[-1][1])
    return kept


def _last_losses(curve, last: int = 10) -> float:
    """The mean of the last training losses the loop computed (NaN without any): its own loss as the run ends."""
    values = [float(v) for v in (curve if curve is not None else [])][-last:]
    return sum(values) / len(values) if values else math.nan


def _not_example_rows(pairs: Iterable) -> str:
    """Why these split batches' inputs have no example rows to take, or "" when each has one row per target.

    The inputs' first dimension is the examples' unless the loop keeps the batch elsewhere (sequence first).
    """
    for x, y in pairs:
        if rows(x) != batch_size(y):
            return (
                f"the inputs' first dimension ({rows(x)}) is not the targets' ({batch_size(y)}): the examples are not"
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
