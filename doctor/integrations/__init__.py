"""The doctor where users already train: a PyTorch Lightning Callback and a Hugging Face TrainerCallback.

    from doctor.integrations.lightning import DoctorCallback             # imports lightning
    from doctor.integrations.huggingface import DoctorTrainerCallback    # imports transformers

Each callback builds a Doctor (doctor/core.py) when training starts, feeds it each training batch and each
backward pass through the framework's hooks, and at the end of training computes the report, logs it under the
logger "doctor" and keeps it. This module holds what the two share and imports neither library, so that the
doctor itself needs neither (they are the optional extra `integrations` of pyproject.toml).
"""

import contextlib
import logging

from doctor.core import CannotJudge, Doctor, Report

LOG = logging.getLogger("doctor")


class Outcome:
    """What a callback keeps of the doctor's judgment: the report, or the one line saying why there is none.

    A run the doctor cannot judge (CannotJudge: a batch it cannot read, a task it does not cover) is logged as a
    warning and the training goes on without the doctor: a diagnosis must never stop the user's run.
    """

    doctor: Doctor | None = None
    report: Report | None = None  # set at the end of training
    cannot_judge: str | None = None  # why there is no report, when the doctor refused the run

    def report_dict(self) -> dict:
        """The report as a JSON-ready dict (Report.to_dict); {"verdict": None, "cannot_judge": why} without one."""
        if self.report is not None:
            return self.report.to_dict()
        return {"verdict": None, "cannot_judge": self.cannot_judge or "training has not ended"}

    def _start(self, doctor_factory) -> None:
        """A new doctor for a new run: the last run's report and refusal are forgotten."""
        self.report, self.cannot_judge, self.doctor = None, None, None
        with self._judging():
            self.doctor = doctor_factory()

    @contextlib.contextmanager
    def _judging(self):
        """Run doctor code; a CannotJudge ends the doctor's part in this run (logged once), not the run."""
        try:
            yield
        except CannotJudge as error:
            self._give_up(str(error))

    def _give_up(self, why: str) -> None:
        if self.cannot_judge is None:
            self.cannot_judge = why
            LOG.warning("doctor: cannot judge this run: %s", why)
        if self.doctor is not None:
            let_go(self.doctor)
        self.doctor = None

    def _conclude(self, log: bool = True) -> None:
        """The report at the end of training, logged: a warning unless healthy (a fault must be seen), else info."""
        if self.doctor is None:
            return
        with self._judging():
            self.report = self.doctor.report()
        self.doctor = None  # its hooks came off in report(); a later run builds a new one
        if self.report is not None and log:
            level = logging.INFO if self.report.verdict == "healthy" else logging.WARNING
            LOG.log(level, "doctor:\n%s", self.report)


def let_go(doctor: Doctor) -> None:
    """Take the doctor's hooks off the model and optimizer: Instruments.finish removes them before it measures."""
    with contextlib.suppress(Exception):  # the hooks are off by then; what it would have measured is not wanted
        doctor.instruments.finish()
