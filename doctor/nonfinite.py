"""The doctor's verdict on a loss that went NaN or inf: its finding (what it leaves unjudged: analysis/findings.py).

The watch that finds the first non-finite loss and what was non-finite first is a collector of the instruments
(harness/instruments/nonfinite.py; the doctor turns it on). The check, its sentence and what to look at for each
origin are in analysis/checks/numerics.py. This module puts the two together for the report (doctor/diagnosis.py).
"""

import math

from analysis.checks.base import Finding
from analysis.checks.numerics import NEXT_STEPS, NONFINITE_LOSS
from analysis.findings import READS_TRAINED_ACCURACY as READS_TRAINED_ACCURACY  # what it leaves unjudged
from harness.instruments.nonfinite import Origin

VERDICT = NONFINITE_LOSS.verdict


def finding(origin: Origin, steps: int, nonfinite_losses: int) -> Finding:
    """The nonfinite_loss finding; `steps` and `nonfinite_losses` are counted over the whole run."""
    evidence = NONFINITE_LOSS.evidence.format(
        first_value=origin.first_value,
        loss_step=origin.loss_step,
        value=nonfinite_losses,
        steps=steps,
        what=origin.what,
        detail=origin.detail,
    )
    judged = NONFINITE_LOSS.judged(nonfinite_losses, NONFINITE_LOSS.fact)
    return Finding(VERDICT, evidence, f"look at {NEXT_STEPS[origin.what]}", math.nan, **judged)
