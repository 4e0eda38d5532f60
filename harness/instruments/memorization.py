"""Memorization and capacity: whether a fresh model from the run's own factory can fit the run's examples.

The checks that need a model of their own: they train new models at fixed sensible rates, full batch, with none
of the run's optimizer settings. A run that cannot fit its data while a fresh model of the same kind memorizes a
few examples (`memorize`) points at the run's training (its rate, its gradients); a model that cannot memorize
even these points at the model itself (dead units from the start, an output that cannot reach the targets).

`fit_capacity` asks the same question of many examples (up to `CAPACITY_EXAMPLES` of those the run trained on):
a fresh copy trained in this clean loop that still cannot fit them is the evidence that the model is too small
for the data, whatever the run's own loop did. A copy that fits them says the opposite: the model has the
capacity, and what held the run back lies in its loop or recipe.

The same copy is a yardstick that knows the model: scored on validation examples it says what this architecture
reaches on the run's own data in a known-good loop (`capacity_val_score`). The outcome gate (analysis/outcome_gate.py)
holds the run against the better of it and the quick references (harness/reference.py), which know nothing of
the model: a broken run of a strong model can still beat a ridge classifier.
"""

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from harness.batches import tensors
from harness.column import F64, I64, NOT_ALONG_THE_RUN, Column, list_of
from harness.instruments.signals import plain_forward
from harness.targets import INDEX_TASKS, Scorer, class_labels, in_classes, task_of

# The capacity fit: enough examples that a model narrower than the problem needs cannot fit them all, few enough
# steps to cost under a second for the grid's MLPs. Measured on digits (seeds 0-2): the grid's MLP fits all 1024
# in 100 full-batch steps (its deep, tanh and saturating variants too); a 4-unit bottleneck fits 82-88% of the way
# (89-92% in 150 steps, 94-97% in 300: given long enough it squeezes more in, so the steps are part of the test).
CAPACITY_EXAMPLES = 1024
CAPACITY_STEPS = 100
MEMORIZE_RATES = (1e-4, 1e-3, 1e-2)  # Adam from below its default to ten times it: the best final loss counts
MEMORIZE_STEPS = 300
CAPACITY_RATES = (1e-3, 1e-2)  # Adam's default and ten times it: the better fit counts (1e-2 fits most MLPs best)
NO_CAPACITY = {
    "capacity_score": math.nan,
    "capacity_baseline": math.nan,
    "capacity_rate": math.nan,
    "capacity_examples": 0,
    "capacity_val_score": math.nan,
    "capacity_val_examples": 0,
}  # what a run without a model factory (or with capacity_examples=0) records

# What `memorize` returns.
MEMORIZE_COLUMNS = (
    Column("memorize_rates", list_of(F64), "Adam rates tried on the fresh model", along=NOT_ALONG_THE_RUN),
    Column("memorize_losses", list_of(F64), "final loss on the memorized examples, per rate", along=NOT_ALONG_THE_RUN),
    Column("memorize_best_loss", F64, "lowest finite final loss over the rates"),
    Column("memorize_best_rate", F64, "rate that reached it"),
)
# What `fit_capacity` returns (NO_CAPACITY where it fits nothing).
CAPACITY_COLUMNS = (
    Column(
        "capacity_score",
        F64,
        "score (accuracy, R², per-label accuracy) of a fresh model on the examples it fitted",
    ),
    Column("capacity_baseline", F64, "what the best constant answer scores on those examples"),
    Column("capacity_rate", F64, "the Adam rate that reached that score (the better of capacity.rates)"),
    Column("capacity_examples", I64, "training examples the fresh model fitted, full batch, capacity.steps steps"),
    Column(
        "capacity_val_score",
        F64,
        "the same fresh model's score on validation examples (at the rate of capacity_score): what this model"
        " reaches on the run's data in a clean loop",
    ),
    Column("capacity_val_examples", I64, "validation examples (a sequence's positions) capacity_val_score rests on"),
)


def memorize(
    model_factory: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable,
    rates: Iterable[float] = MEMORIZE_RATES,
    steps: int = MEMORIZE_STEPS,
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


def constant_score(targets: torch.Tensor, task: str, n_classes: int | None = None) -> float:
    """What the best constant answer scores on these targets: the baseline of "fits above the baseline".

    The most frequent class's share for one class per example, each label's more frequent value for multi-label
    (accuracy per label), 0 for regression (R² of always answering the mean).
    """
    if task == "regression":
        return 0.0
    if task == "multilabel":
        share = targets.float().reshape(len(targets), -1).mean(dim=0)
        return float(torch.maximum(share, 1 - share).mean())
    labels = class_labels(targets, task)
    labels = labels[in_classes(labels, n_classes)]  # a label the loss ignores (-100, padding) is no class
    return float(torch.bincount(labels).max()) / len(labels) if len(labels) else math.nan


def _score_rows(targets: torch.Tensor, task: str | None) -> torch.Tensor:
    """One batch's targets laid out for `constant_score`: rows of labels, a sequence's positions, else as they are."""
    if task in ("multilabel", "onehot"):
        return targets.reshape(len(targets), -1)
    return targets.reshape(-1) if task == "sequence" else targets


def fit_capacity(
    model_factory: Callable[[], nn.Module],
    batches: list[tuple],
    loss_fn: Callable,
    rates: Iterable[float] = CAPACITY_RATES,
    steps: int = CAPACITY_STEPS,
    seed: int = 0,
    check: Callable[[], None] = lambda: None,
    forward: Callable = plain_forward,
    held_out: list[tuple] | None = None,
) -> dict:
    """How much of these training examples a fresh model fits in a clean loop: Adam at each rate, full batch.

    `batches` are (inputs, targets) pairs, together the examples to fit; each step's gradient is over all of them
    (summed batch by batch, weighted by size), so the fit does not depend on how the run batched them. Returns
    the best score over the rates of the fresh model on the same examples, in the task's metric (accuracy, R²,
    accuracy per label), the rate that reached it, the best constant answer's score and the number of examples;
    `NO_CAPACITY` (not measured) with no steps or no examples. `held_out`: (inputs, targets) batches of
    validation examples; the model of the rate that fitted best is scored on them too (NaN without them). The
    rate is chosen on the training fit alone, so that the validation score is not the best of several tries.
    """
    if not steps or not batches:  # not measured: no evidence either way
        return dict(NO_CAPACITY)
    total = sum(len(y) for _, y in batches)
    best, best_rate, task, classes = -math.inf, math.nan, None, None
    val_score, val_examples = math.nan, 0
    for rate in [float(r) for r in rates]:
        with torch.random.fork_rng(devices=[]):  # the run's own RNG stream is left untouched
            torch.manual_seed(seed)
            model = model_factory().to(tensors(batches[0][0])[0].device)
        _fit_full_batch(model, batches, loss_fn, rate, steps, check, forward)
        score, task, classes = _score_fitted(model, batches, forward)
        if math.isfinite(score) and score > best:
            best, best_rate = score, rate
            if held_out:
                val_score, val_examples = _score(model, held_out, task, forward)
    # A sequence's targets are counted per position (sequences of any length), the others per example.
    targets = torch.cat([_score_rows(y, task) for _, y in batches])
    return {
        "capacity_score": best if math.isfinite(best) else math.nan,
        "capacity_baseline": constant_score(targets, task, classes),
        "capacity_rate": best_rate,
        "capacity_examples": total,
        "capacity_val_score": val_score,
        "capacity_val_examples": val_examples,
    }


def _fit_full_batch(
    model: nn.Module, batches: list[tuple], loss_fn: Callable, rate: float, steps: int, check: Callable, forward
) -> None:
    """Adam at `rate` for `steps` steps, each on the gradient over every example (batch by batch, weighted by size)."""
    sizes = [len(y) for _, y in batches]
    total = sum(sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=rate)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for (x, y), size in zip(batches, sizes, strict=True):
            (loss_fn(forward(model, x), y) * (size / total)).backward()
        optimizer.step()
        check()


def _score_fitted(model: nn.Module, batches: list[tuple], forward: Callable) -> tuple[float, str, int | None]:
    """The fitted model's score on the examples it fitted, in the task's metric; the task and its class count."""
    model.eval()
    scorer, task, classes = None, None, None
    with torch.no_grad():
        for x, y in batches:
            outputs = forward(model, x)
            if scorer is None:
                task = task_of(y, outputs)
                classes = outputs.shape[-1] if task in INDEX_TASKS else None
                scorer = Scorer(task)
            scorer.add(outputs, y)
    return scorer.value(), task, classes


def _score(model: nn.Module, batches: list[tuple], task: str, forward: Callable) -> tuple[float, int]:
    """The model's score on these (inputs, targets) batches in eval mode, and how many targets it counted."""
    scorer = Scorer(task)
    with torch.no_grad():
        for x, y in batches:
            scorer.add(forward(model, x), y)
    return scorer.value(), int(scorer.count)
