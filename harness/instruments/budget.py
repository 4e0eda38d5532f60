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

After the loop, the doctor's report measures what needs the run to be over: its evaluations, memorization, a clean
copy of the model, the quick references. `ReportBudget` holds their time to at most `REPORT_SHARE` of the loop's
own time or `REPORT_FLOOR_S` seconds, whichever is larger: each pass is timed by name, and a fit of fresh models that
would not finish within what is left is cut (checked every fit step, once a few steps say how long one takes) and
recorded as not measured, rather than let a 4-second run wait ten minutes for its report (issue 51).
"""

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

DENSE_STEPS = 10  # the initialization checks, the first loss and the censuses of steps 0, 1, 2, 4 and 8
SHARE = 0.03  # of the loop's own time: the doctor's cost users said they would keep switched on (issue 34)
# The report's time: at most this share of the loop's own time, or this many seconds, whichever is larger (issue 51's
# goal: a report that waits longer than a quarter of the training, or half a minute, is one users stop asking for).
REPORT_SHARE = 0.25
REPORT_FLOOR_S = 30.0
# A fit's whole length is projected once it has run this many steps (the first builds the model) and this long: a
# few heavy steps say enough, and many light ones are needed before a busy host's pause stops moving the projection.
PROJECTED_AFTER = 3
PROJECTED_AFTER_S = 0.5


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
    # Each pass after the loop and its seconds; each fit cut at the report's budget and where (read-only, as a kept
    # run reads them back: doctor/observed_io.py).
    after_passes: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    after_cut: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    after_budget_s: float = float("nan")  # the report's time budget (ReportBudget); NaN or inf: none

    @property
    def share(self) -> float:
        """The instruments' time over the loop's own (NaN before the loop has run)."""
        return self.spent_s / self.loop_s if self.loop_s > 0 else float("nan")

    def line(self) -> str:
        """One line for the report: what the doctor cost, and how much of the run it watched to keep to its budget."""
        watched = "every step" if self.watched_steps == self.steps else f"{self.watched_steps} of {self.steps} steps"
        after = "" if self.after_s != self.after_s else f"; after the loop, {self.after_line()}"  # NaN: not measured
        return (
            f"{100 * self.share:.1f}% of the loop's own {self.loop_s:.2f} s ({self.start_s:.3f} s of it at the first"
            f" step; budget {100 * self.share_budget:g}% for the rest), watching {watched} in full; the loss, its"
            f" finiteness, the data wait and the rate on every step{after}"
        )

    def after_line(self) -> str:
        """What the report cost after the loop: its whole time, each pass's, the budget, and any pass it cut."""
        passes = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.after_passes.items())
        budget = f" of a {self.after_budget_s:.0f} s budget" if math.isfinite(self.after_budget_s) else ""
        cut = "".join(f"; {name} cut at the budget ({where}): not measured" for name, where in self.after_cut.items())
        return f"{self.after_s:.2f} s{budget} ({passes or 'evaluations and fits'}{cut}; {self.after_caps})"

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
            "after_passes": dict(self.after_passes),
            "after_cut": dict(self.after_cut),
            "after_budget_s": self.after_budget_s if math.isfinite(self.after_budget_s) else None,
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
        return self.affords(0.0, loop_start)

    def affords(self, seconds: float, loop_start: float | None) -> bool:
        """Whether `seconds` more of the instruments' time (a pass over validation) keeps them within the share.

        Never before the loop has started: there is no loop time to measure the share on. The first step's one-off
        work (the task read, the validation before training, the census at initialization) is in the cost reported,
        not in what the budget rations: it would starve the rest of a short run.
        """
        if loop_start is None:
            return False
        loop_s = time.perf_counter() - loop_start - self.spent_s
        return self.spent_s - self.start_s + seconds <= self.share * loop_s

    def cost(self, steps: int, loop_start: float | None) -> Cost:
        elapsed = time.perf_counter() - loop_start if loop_start is not None else 0.0
        return Cost(self.share, self.spent_s, max(elapsed - self.spent_s, 0.0), self.watched_steps, steps, self.start_s)


class OverReportBudget(Exception):
    """A fit after the loop stopped: it would not have finished within the report's time budget."""


class ReportBudget:
    """The report's time budget after the loop, and its state: each pass and its seconds, the fits it cut and where.

    The budget is at most `share` of the loop's own time or `floor_s` seconds, whichever is larger.

    `start(loop_s)` sets the budget as the loop ends. `timed(name)` times a pass. `run(name, steps, fit, fallback)`
    runs a fit of `steps` steps that calls the check it is given once a step: the check raises once the budget is
    spent, or once the steps so far project the fit's end past it; the fit's measurements are then `fallback` (not
    measured), and the cut is kept with where it happened. A fit that runs out of the device's memory (a fresh copy
    and its optimizer beside the trained model) is kept as not measured the same way, rather than end the run.
    """

    def __init__(self, share: float = REPORT_SHARE, floor_s: float = REPORT_FLOOR_S):
        if isinstance(share, bool) or not isinstance(share, int | float) or not share > 0:
            raise ValueError(f"the report budget's share of the loop's time must be above 0, e.g. 0.25; not {share!r}")
        if isinstance(floor_s, bool) or not isinstance(floor_s, int | float) or not floor_s >= 0:
            raise ValueError(f"the report budget's floor_s must be seconds >= 0, e.g. 30; not {floor_s!r}")
        self.share, self.floor_s = float(share), float(floor_s)
        self.allowed_s = math.inf
        self.started = time.perf_counter()
        self.passes: dict[str, float] = {}
        self.cut: dict[str, str] = {}

    def start(self, loop_s: float) -> None:
        """The loop is over, after `loop_s` seconds of its own: the report's time runs from now."""
        self.allowed_s = max(self.share * loop_s, self.floor_s)
        self.started = time.perf_counter()
        self.passes, self.cut = {}, {}

    @property
    def spent_s(self) -> float:
        return time.perf_counter() - self.started

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.passes[name] = self.passes.get(name, 0.0) + time.perf_counter() - began

    def run(self, name: str, steps: int, fit: Callable[[Callable[[], None]], dict], fallback: dict) -> dict:
        """`fit(check)`'s measurements, or `fallback` where the check cut it at the budget."""
        deadline = self.started + self.allowed_s
        began, done, first = time.perf_counter(), 0, 0.0

        def check() -> None:
            nonlocal done, first
            done += 1
            now = time.perf_counter()
            first = first or now  # the first step also builds the model: the projection times the steps after it
            projected = now + (now - first) / max(done - 1, 1) * (steps - done)
            measured = done >= PROJECTED_AFTER and now - began >= PROJECTED_AFTER_S
            if now > deadline or (measured and projected > deadline):
                raise OverReportBudget(
                    f"after {done} of {steps} steps, {now - began:.1f} s; the whole would have ended"
                    f" {projected - self.started:.0f} s into the report"
                )

        with self.timed(name):
            if time.perf_counter() > deadline:  # nothing left for it: not started
                self.cut[name] = "not started: the budget was spent"
                return dict(fallback)
            try:
                return fit(check)
            except OverReportBudget as cut:
                self.cut[name] = str(cut)
                return dict(fallback)
            except torch.OutOfMemoryError as error:  # a fresh copy beside the trained model: the device had no room
                self.cut[name] = f"ran out of the device's memory: {str(error).splitlines()[0][:200]}"
                return dict(fallback)
