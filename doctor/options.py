"""The Doctor's options, as one value checked once: `DoctorOptions`, and the step and time budgets' checks.

`Doctor(model, optimizer, loss_fn, loader, max_steps=..., scaler=..., ...)` keeps its keyword options here, so
that a value out of range is refused as the Doctor is built (ValueError naming it, before any hook is on the
model) and the watch reads them from one place. The command line and recipe files check their --max-steps and
--max-seconds with the same `checked_limit` (doctor/recipe.py).
"""

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from harness.batches import Key
from harness.instruments import CAPACITY_EXAMPLES
from harness.instruments.budget import REPORT_SHARE, SHARE, CostBudget, ReportBudget
from harness.instruments.memorization import CAPACITY_STEPS, MEMORIZE_STEPS


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


@dataclass(frozen=True)
class DoctorOptions:
    """The Doctor's keyword options (docs/doctor.md), checked as they are given: ValueError for one out of range.

    `budget` and `report_budget` are kept as the budgets they stand for (a share of the loop's time becomes a
    CostBudget or a ReportBudget; None becomes no cost budget, or a report budget with no cap), so that the watch
    never reads a share where it needs a budget.
    """

    validation: Iterable | None = None  # read before the first step, while the run trains, and at the report
    model_factory: Callable[[], nn.Module] | None = None  # fresh models, for memorization and the capacity fit
    census_every: int = 50
    # The last training batches kept, to measure training accuracy on: at least this many of them.
    keep_batches: int = 8
    memorize_steps: int = MEMORIZE_STEPS  # per rate, on a fresh model from model_factory (3 rates)
    # The capacity fit's examples: the last this many trained on (0: no capacity fit, so no model_too_small).
    capacity_examples: int = CAPACITY_EXAMPLES
    capacity_steps: int = CAPACITY_STEPS
    # With mixed precision the loop's GradScaler: .grad holds gradients times its scale until unscale_.
    scaler: "torch.amp.GradScaler | None" = None
    # Where each batch keeps its inputs and targets, and which output the loss reads (harness/batches.py); None:
    # read from the batches and the model.
    inputs: Key | Sequence[int | str] | None = None
    targets: Key | None = None
    output: Key | None = None
    # At most `budget` of the loop's own time: every step densely at first, then a sample of the optimizer cycles
    # (harness/instruments/budget.py); None watches every step whatever it costs.
    budget: float | CostBudget | None = SHARE
    max_steps: int | None = None  # the watch stops once one of the two is spent
    max_seconds: float | None = None
    # The report's time after the loop: at most `report_budget` of the loop's own time or REPORT_FLOOR_S seconds,
    # whichever is larger (harness/instruments/budget.py); a fit that would run past it is cut. None: no cap (each
    # pass still timed). It keeps the fits it cut, for the report.
    report_budget: float | ReportBudget | None = REPORT_SHARE

    def __post_init__(self):
        check_budgets(self.max_steps, self.max_seconds)
        for name in ("capacity_examples", "capacity_steps"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be an int >= 0 (0: no capacity fit), not {value!r}")
        budget, report_budget = self.budget, self.report_budget
        if budget is not None and not isinstance(budget, CostBudget):
            object.__setattr__(self, "budget", CostBudget(budget))  # frozen: set once, here
        if report_budget is None:
            report_budget = ReportBudget(floor_s=math.inf)
        if not isinstance(report_budget, ReportBudget):
            report_budget = ReportBudget(report_budget)
        object.__setattr__(self, "report_budget", report_budget)

    @property
    def capacity_fit_examples(self) -> int:
        """The capacity fit's examples: none without a model factory to fit a fresh copy with."""
        return self.capacity_examples if self.model_factory is not None else 0
