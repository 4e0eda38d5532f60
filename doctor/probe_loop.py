"""`probe`: the doctor running a short standard training loop itself on a recipe's pieces, and its Ctrl-C.

A recipe (a model factory, batches, a loss, an optimizer factory) needs no loop of its own: `probe` trains it
under a Doctor (doctor/watch.py) and returns the report. `stopped_by_user` and `final_report` are what a Ctrl-C
does to a run, here and for a recipe's own train() (doctor/recipe.py): the report of the steps so far, or
`Interrupted` in one line where there is none to give.
"""

import itertools
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from doctor.options import checked_limit
from doctor.refusals import CannotJudge, Interrupted, require_parameters
from doctor.report import Report
from doctor.watch import Doctor
from harness.batches import to_device
from harness.instruments.budget import REPORT_SHARE, SHARE, CostBudget, ReportBudget
from harness.instruments.memorization import CAPACITY_STEPS, MEMORIZE_STEPS


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
) -> Report:
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
    require_parameters(model)  # before the optimizer, which would refuse an empty parameter list in its own words
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
    _train(doctor, model, optimizer, loss_fn, cycle(batches), steps, device)
    return final_report(doctor)


def _train(doctor: Doctor, model: nn.Module, optimizer, loss_fn: Callable, batches: Iterator, steps: int, device):
    """The probe's loop: at most `steps` plain steps under the doctor, ended early by a budget, Ctrl-C or no memory.

    Running out of memory is reported, not raised: the report's bigger-machine section is the answer to it.
    """
    layout = doctor.layout
    model.train()
    try:
        for _step, _batch in zip(range(steps), doctor.watch(batches), strict=False):
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


def stopped_by_user(doctor: Doctor | None) -> Doctor:
    """The doctor of a run Ctrl-C stopped, marked so; Interrupted if there is none or it saw no training step."""
    if doctor is None or doctor.steps == 0:
        raise Interrupted("interrupted (Ctrl-C) before the first training step: nothing to report") from None
    doctor.interrupted()
    return doctor


def final_report(doctor: Doctor) -> Report:
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
