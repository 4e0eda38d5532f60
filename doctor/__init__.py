"""The training-run doctor: the grid's checks and rules on your own PyTorch training run.

from doctor import Doctor, probe          # watch a loop, or let the doctor run one
from doctor import diagnose, Observed     # judge a finished run (doctor.finish()) under any thresholds
"""

from doctor.core import CannotJudge, Doctor, Observed, Report, UnsupportedTask, diagnose, probe
from doctor.machine import Check, Checklist

__all__ = ["CannotJudge", "Check", "Checklist", "Doctor", "Observed", "Report", "UnsupportedTask", "diagnose", "probe"]
