"""What is measured once training has ended, and the run's record put together: the same way for a cell and the doctor.

Four things, each on a fresh copy of the model or on the examples alone, never on the trained model:
memorization (can a fresh model fit a handful of training examples?), the capacity fit (how much of many of them
can it fit in a clean loop?), both in harness/instruments/memorization.py, the quick references (what simple
models reach on the same examples, harness/reference.py) and the leak readings (one column, or validation copies of
training examples, that predict the label far better than the rest: harness/leak.py). The cell (harness/cell.py) and
the doctor (doctor/after_the_loop.py) differ only in which examples they hand over and how long the probes train
(`Probes`); what they hand over as None is recorded as not measured.

`run_record` is the one place a run's measurements become one record, for both: the instruments' columns, the final
scores, the end-of-run columns and the task's size. `assemble` merges such groups of columns, and a column two groups
both produce fails loudly instead of one silently replacing the other.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from harness.column import F64, I64, Column
from harness.instruments.budget import ReportBudget
from harness.instruments.memorization import (
    CAPACITY_RATES,
    CAPACITY_STEPS,
    MEMORIZE_RATES,
    MEMORIZE_STEPS,
    NO_CAPACITY,
    fit_capacity,
    memorize,
)
from harness.instruments.signals import plain_forward
from harness.leak import EMPTY as NO_LEAK
from harness.leak import leak_fit
from harness.reference import EMPTY as NO_REFERENCE
from harness.reference import reference_fit

# The columns `run_record` sets: the task's size (from the cell's dataset, or the doctor's first batch) and the scores
# of the trained model (the cell's whole splits, the doctor's last batches and validation).
COLUMNS = (
    Column("n_classes", I64, "number of classes C"),
    Column("ln_classes", F64, "ln C: the first loss of a model that guesses uniformly"),
    Column("final_train_loss", F64, "training-set loss after the last step (eval mode)", per_budget=True),
    Column("final_train_acc", F64, "training-set accuracy after the last step", per_budget=True),
    Column("final_val_loss", F64, "validation loss after the last step", per_budget=True),
    Column("final_val_acc", F64, "validation accuracy after the last step", per_budget=True),
)
SCORE_COLUMNS = ("final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc")

# What a run records where nothing was memorized (no model factory, no example rows, every example non-finite).
NOT_MEMORIZED = {
    "memorize_rates": [],
    "memorize_losses": [],
    "memorize_best_loss": float("nan"),
    "memorize_best_rate": float("nan"),
}

# The two fits of fresh models, by the names a report's budget keeps them under, and the columns each measures: a fit
# cut at the budget leaves these not measured, and the checks reading them not judged.
MEMORIZATION, CLEAN_COPY = "memorization", "a clean copy"
FIT_COLUMNS = {MEMORIZATION: tuple(NOT_MEMORIZED), CLEAN_COPY: tuple(NO_CAPACITY)}


@dataclass(frozen=True)
class Probes:
    """How the two probes train their fresh models: Adam at each rate, full batch, this many steps."""

    memorize_rates: tuple[float, ...] = MEMORIZE_RATES
    memorize_steps: int = MEMORIZE_STEPS
    capacity_rates: tuple[float, ...] = CAPACITY_RATES
    capacity_steps: int = CAPACITY_STEPS
    seed: int = 0  # the fresh models' initialization, and the references' split where there is no validation
    check: Callable[[], None] = field(default=lambda: None)  # called every probe step (a cell's time limit)
    forward: Callable = plain_forward  # how the model is called on a batch's inputs (the doctor's batch layout)


def end_of_run(
    make_model: Callable[[], torch.nn.Module] | None,
    loss_fn: Callable,
    probes: Probes,
    memorize_on: tuple | None,
    capacity_on: list[tuple] | None,
    kept: tuple | None,
    held_out: tuple | None = None,
    capacity_held_out: list[tuple] | None = None,
    budget: ReportBudget | None = None,
) -> dict:
    """The end-of-run columns: memorization, the capacity fit, the quick references and the leak readings.

    `memorize_on`: (inputs, targets) to memorize; `capacity_on`: (inputs, targets) batches to fit, and
    `capacity_held_out` the validation batches the fitted copy is scored on, both as the model takes them; `kept`:
    the examples the references are fitted on (rows), scored on `held_out`. None (or no factory): recorded as not
    measured. `budget` (the doctor's; a cell has none): each pass is timed, and a fit that would not end within it is
    cut and recorded as not measured (`budget.cut` says which, and where).
    """
    budget = budget or ReportBudget(floor_s=math.inf)  # none: every pass runs to its end

    def fitted(name: str, fit: Callable, data: tuple, rates: tuple, steps: int, fallback: dict, **more) -> dict:
        """`fit` of fresh models on `data` under the probes' settings, cut where the budget says (then `fallback`)."""

        def capped_fit(capped: Callable[[], None]) -> dict:
            check = lambda: (probes.check(), capped())  # noqa: E731 - the cell's time limit, then the budget's
            common = {"seed": probes.seed, "check": check, "forward": probes.forward}
            return fit(make_model, *data, loss_fn, rates=rates, steps=steps, **common, **more)

        return budget.run(name, len(rates) * steps, capped_fit, fallback)

    memorized, capacity = dict(NOT_MEMORIZED), dict(NO_CAPACITY)
    if make_model is not None and memorize_on is not None:
        memorized = fitted(
            MEMORIZATION, memorize, memorize_on, probes.memorize_rates, probes.memorize_steps, NOT_MEMORIZED
        )
    if make_model is not None and capacity_on:
        capacity = fitted(
            CLEAN_COPY,
            fit_capacity,
            (capacity_on,),
            probes.capacity_rates,
            probes.capacity_steps,
            NO_CAPACITY,
            held_out=capacity_held_out,
        )
    reference, leak = dict(NO_REFERENCE), dict(NO_LEAK)
    if kept is not None:
        with budget.timed("quick references"):
            reference = reference_fit(*kept, *(held_out or (None, None)), seed=probes.seed)
        with budget.timed("leak readings"):
            leak = leak_fit(*kept, *(held_out or (None, None)), seed=probes.seed)  # harness/leak.py
    return assemble(memorized, capacity, reference, leak)


def run_record(instruments: Mapping, scores: Mapping, after: Mapping, n_classes: int, uninformed_loss: float) -> dict:
    """A run's measurements as one record: the instruments' columns, the final scores, the end-of-run columns.

    `scores`: the trained model's loss and score on training and validation data, keyed by SCORE_COLUMNS;
    `after`: what end_of_run measured; `n_classes` and `uninformed_loss` (ln C for classes): the task's size.
    """
    if set(scores) != set(SCORE_COLUMNS):
        raise ValueError(f"scores must hold exactly {', '.join(SCORE_COLUMNS)}, not {', '.join(scores)}")
    task = {"n_classes": n_classes, "ln_classes": uninformed_loss}
    return assemble(instruments, scores, after, task)


def assemble(*groups: Mapping) -> dict:
    """One record from groups of columns; a column produced by two groups is a bug, and fails naming it."""
    record: dict = {}
    for group in groups:
        twice = record.keys() & group.keys()
        if twice:
            raise ValueError(f"columns produced twice in one record: {', '.join(sorted(twice))}")
        record.update(group)
    return record
