"""The instruments' cost budget: how much of the loop's own time they may take, and which steps they watch for it.

A user keeps the doctor switched on only if it costs little. On a loop of one-millisecond steps, watching every
step (a dozen collectors' Python on each batch, backward pass and optimizer step) costs about a tenth of the loop.
So the doctor watches the first `dense_steps` in full (the initialization checks, the first loss, the first
censuses), and after that watches an optimizer cycle, or takes a census the schedule asks for, only while its own
time so far is within `share` of the loop's own time: on a slow loop that is every cycle and every census, on a
fast one a sample (a census refused is taken after the next cycle watched, and never two in a row are refused).

A collector that needs whole cycles (whether .grad was cleared, the backward passes per optimizer step) reads
whole watched cycles: the decision is taken between one optimizer step and the next, never inside the backward
passes a step accumulates. What every step needs (the loss, whether it is finite, the wait for data, the rate
the optimizer used) is read on every step, watched or not.

The grid's cells have no budget: every step is watched, and their records do not depend on the host's speed.
The doctor's own time is measured where it runs: its per-batch and per-backward calls and its reads around the
optimizer update. Its hook on the model's forward (the train/eval count, on models with dropout or batch norm)
and Python's cost of calling into it are not timed: bench/doctor_overhead.py measures the whole cost, beside the
bare loop.
"""

import time
from dataclasses import dataclass

DENSE_STEPS = 10  # the initialization checks, the first loss and the censuses of steps 0, 1, 2, 4 and 8
SHARE = 0.03  # of the loop's own time: the doctor's cost users said they would keep switched on (issue 34)


@dataclass(frozen=True)
class Cost:
    """What the instruments cost on one run: their own time against the loop's, and the steps they watched."""

    share_budget: float  # the budget: the most of the loop's own time the instruments were to take
    spent_s: float  # the instruments' own time, measured where they run
    loop_s: float  # the loop's own time: from its first batch to now, less the instruments' time
    watched_steps: int  # backward passes whose whole optimizer cycle every collector read
    steps: int  # backward passes seen
    start_s: float = 0.0  # of spent_s, the first step's: the task read, the checks at initialization (not rationed)
    # After the loop (not in spent_s: the loop is over): the doctor's evaluations and its fits of fresh copies and
    # references, and the caps those fits ran under. NaN: not measured (the grid's cells, or before the report).
    after_s: float = float("nan")
    after_caps: str = ""

    @property
    def share(self) -> float:
        """The instruments' time over the loop's own (NaN before the loop has run)."""
        return self.spent_s / self.loop_s if self.loop_s > 0 else float("nan")

    def line(self) -> str:
        """One line for the report: what the doctor cost, and how much of the run it watched to keep to its budget."""
        watched = "every step" if self.watched_steps == self.steps else f"{self.watched_steps} of {self.steps} steps"
        after = (
            ""
            if self.after_s != self.after_s  # NaN: not measured
            else f"; after the loop, {self.after_s:.2f} s of evaluations and fits ({self.after_caps})"
        )
        return (
            f"{100 * self.share:.1f}% of the loop's own {self.loop_s:.2f} s ({self.start_s:.3f} s of it at the first"
            f" step; budget {100 * self.share_budget:g}% for the rest), watching {watched} in full; the loss, its"
            f" finiteness, the data wait and the rate on every step{after}"
        )

    def to_dict(self) -> dict:
        return {
            "share": self.share if self.loop_s > 0 else None,  # JSON has no NaN
            "share_budget": self.share_budget,
            "spent_s": self.spent_s,
            "start_s": self.start_s,
            "loop_s": self.loop_s,
            "watched_steps": self.watched_steps,
            "steps": self.steps,
            "after_s": None if self.after_s != self.after_s else self.after_s,
            "after_caps": self.after_caps,
        }


class CostBudget:
    """The budget (`share` of the loop's own time, the first `dense_steps` watched whatever they cost) and its state.

    It holds the instruments' time spent so far, and decides whether the next optimizer cycle is watched and whether
    a census is taken.
    """

    def __init__(self, share: float = SHARE, dense_steps: int = DENSE_STEPS):
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ValueError(f"the cost budget is a share of the loop's time in (0, 1], e.g. 0.03; not {share!r}")
        if isinstance(dense_steps, bool) or not isinstance(dense_steps, int) or dense_steps < 0:
            raise ValueError(f"dense_steps must be an int >= 0 (the first steps watched in full), not {dense_steps!r}")
        self.share, self.dense_steps = float(share), dense_steps
        self.spent_s = 0.0
        self.start_s = 0.0  # of it, up to the end of the first step: reading the task, the checks at initialization
        self.watched_steps = 0

    def spend(self, since: float) -> None:
        """The instruments worked from `since` (a time.perf_counter()) to now."""
        self.spent_s += time.perf_counter() - since

    def allows(self, next_step: int, loop_start: float | None) -> bool:
        """Whether the optimizer cycle starting at backward pass `next_step` is watched in full.

        Always within the dense steps; after that while the instruments' time so far is within the budget's share
        of the loop's own time. (The census steps are read whatever this says: their collectors are not sampled.)
        """
        if next_step < self.dense_steps or loop_start is None:
            return True
        # The first step's one-off work (the task read, the validation before training, the census at initialization)
        # is in the cost reported, not in what the budget rations: it would starve the rest of a short run.
        loop_s = time.perf_counter() - loop_start - self.spent_s
        return self.spent_s - self.start_s <= self.share * loop_s

    def cost(self, steps: int, loop_start: float | None) -> Cost:
        elapsed = time.perf_counter() - loop_start if loop_start is not None else 0.0
        return Cost(self.share, self.spent_s, max(elapsed - self.spent_s, 0.0), self.watched_steps, steps, self.start_s)
