"""The doctor's reads of validation while the run trains: when, and at what cost.

Whether a run that stopped was still learning is read on its own terms: on validation where the doctor read it
often enough late in the run, else on the training loss (analysis/loss_curves.py: late_val_fall_z, late_fall_z;
analysis/outcome_gate.py: OutcomeGate.still_learning). A training loss that still falls on a run whose validation
loss has flattened says "train longer" where longer training would not help.

Each read is a whole pass over the validation, so the reads thin out as the run grows: never within `MIN_GAP`
steps of the last one, nor within the steps so far over `PER_RUN` (so about PER_RUN x ln(4/3), 9, in any run's last
quarter, and PER_RUN x ln(N) in a run of N steps). Under the doctor's cost budget a read is taken only while the
budget has room for it at the last read's cost (harness/instruments/budget.py: CostBudget.affords); on a short loop
of fast steps that is rarely, and the training loss is read instead. The grid's cells read validation every
`eval_every` steps of their own (harness/cell.py).
"""

from harness.instruments.budget import CostBudget

MIN_GAP = 8  # steps: a validation pass every few steps would cost more than the steps
PER_RUN = 32  # reads per e-fold of the run's length: about 9 in its last quarter


class ValidationReads:
    """When the doctor next reads validation during the run, and the last read's step and cost."""

    def __init__(self, budget: CostBudget | None):
        self.budget = budget  # None: every read the spacing allows (the doctor watched without a budget)
        self.last_step: int | None = None
        self.last_s = 0.0  # what the last read cost: the next one is taken only if the budget has room for as much

    def due(self, step: int, loop_start: float | None) -> bool:
        """Whether to read validation before backward pass `step`, its spacing and the budget allowing."""
        if self.last_step is not None and step - self.last_step < max(MIN_GAP, step // PER_RUN):
            return False
        return self.budget is None or self.budget.affords(self.last_s, loop_start)

    def read(self, step: int, seconds: float) -> None:
        self.last_step, self.last_s = step, seconds
