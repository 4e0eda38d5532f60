"""The training-run doctor: the grid's checks and rules on your own PyTorch training run.

from doctor import Doctor, probe
"""

from doctor.core import CannotJudge, Doctor, Report, UnsupportedTask, probe

__all__ = ["CannotJudge", "Doctor", "Report", "UnsupportedTask", "probe"]
