"""`Observed`: one finished run as the doctor saw it, the one value `diagnose` reads.

Apart from the watch (doctor/watch.py) and the judging (doctor/diagnosis.py), and importing neither, so that the
bigger-machine checklist (doctor/machine.py) and a run kept as JSON (doctor/observed_io.py) can read it without an
import circle, and a run can be judged again under other thresholds without training again.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from harness.instruments.budget import Cost
from harness.instruments.nonfinite import Origin

NO_VALIDATION = "no validation given"


@dataclass(frozen=True)
class Observed:
    """One finished run as the doctor saw it: everything `diagnose` reads (no model, no hooks, no device).

    `measurements` is keyed like a grid record's columns; the rest is what the verdict and the checklist need
    beside them: the validation (loss, score) before training, where the run ran and its memory, the first
    non-finite value's origin, and how memorization went.
    """

    measurements: Mapping
    steps: int
    val_start: tuple[float, float] | None = None
    on_accelerator: bool = False
    memory: str = "CPU run"  # the accelerator's peak allocation against its size
    out_of_memory: str | None = None  # the error, where the loop ran out of memory
    nonfinite: Origin | None = None  # where the first NaN or inf came from (harness/instruments/nonfinite.py)
    unmemorized: str = "no model factory given"  # why memorization was not measured, if it was not
    unvalidated: str = NO_VALIDATION  # why the run was judged without validation ("" where it was not)
    memorized_on: int = 0  # examples memorization fitted
    # The fits after the loop cut at the report's time budget, and where (read-only, as a kept run reads it back)
    cut_at_report: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cost: Cost | None = None  # what the doctor's instruments cost on the loop (None: watched without a budget)
    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    input_scale: str = ""  # why the input scale was not measured ("" when it was, or means nothing: token ids)
    examples_not_rows: str = ""  # why the examples are not rows of the inputs ("" when they are): no reference fit
    # Why the doctor ran no evaluation of its own ("" where it did): the loss reads a prediction forward() does not give
    own_evaluations: str = ""
    rows_are_positions: bool = False  # the loss's rows are a sequence's positions, flattened by the loop
    # Under torch.distributed: every rank's evidence (harness/instruments/ranks.py), this rank's number, the world's
    # size and whether the gather reached every rank (doctor/distributed.py: gather). None on one process.
    ranks: Mapping | None = None
