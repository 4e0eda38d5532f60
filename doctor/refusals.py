"""What the doctor refuses, and how: its exceptions, and the checks that raise them before a run is judged.

A run the doctor cannot judge is refused in one line (`CannotJudge`, the command line's exit status 2) rather than
given a verdict its rules would get wrong; a Ctrl-C with nothing to report is `Interrupted`. They live apart from
the watch (doctor/watch.py) so that the task reading, the probe loop and the command line can raise and catch them
without importing the Doctor.
"""

import contextlib

from torch import nn

from harness.batches import BatchError
from harness.instruments.probe import FirstLayer


class CannotJudge(Exception):
    """The doctor cannot judge this run (the command line's exit status 2); the message says why, in one line."""


class UnsupportedTask(CannotJudge, ValueError):
    """The batches, model or task are not the ones the doctor covers: its rules would give a wrong verdict."""


class TaskFromLoss(UnsupportedTask):
    """The first batch's targets and the model's output make no task: it is read at the first step, from the loss.

    Not raised to the user unless the loss's own inputs make no task either (`Doctor._read_task_from_loss`): a loop
    may reshape the output before its loss (`output.view(-1, ntokens)`), decode it in a Lightning `training_step`,
    or score something other than the batch's targets (an autoencoder's inputs). Holds what the first layer was
    handed and the shape of the forward's output, for the reading at the first step.
    """

    def __init__(self, message: str, first: FirstLayer, output_shape: tuple[int, ...]):
        super().__init__(message)
        self.first, self.output_shape = first, output_shape


class Interrupted(KeyboardInterrupt):
    """Ctrl-C with no report to give (before the first training step, or during the end-of-run measurements).

    A KeyboardInterrupt still, as the user asked to stop; the message says in one line when it came.
    """


def require_parameters(model: nn.Module) -> None:
    """CannotJudge for a model with no parameters: no optimizer can train it, and the doctor has nothing to read."""
    if next(iter(model.parameters()), None) is None:
        raise UnsupportedTask(
            f"the model has no parameters to train: {type(model).__name__} registers no nn.Parameter (layers kept in"
            " a plain list or dict rather than nn.ModuleList or nn.ModuleDict, or tensors not wrapped in"
            " nn.Parameter, are not registered)"
        )


@contextlib.contextmanager
def refusing():
    """A batch or output the layout cannot read is a run the doctor cannot judge (exit status 2), said in one line."""
    try:
        yield
    except BatchError as error:
        raise UnsupportedTask(str(error)) from None
