"""Loss curves: the training loss at every step, its spikes, and the validation the loop logs.

The first loss says whether the model starts where an untrained one should (ln C for C balanced classes); losses
that are not finite say the run blew up; spikes, a loss far above the steps just before it, come from bad batches
(periodic ones from a bad shard that comes round each epoch) or from a rate at the edge of stability.
"""

import math

import torch

from harness.column import BATCH_INDICES, EVERY_STEP, F64, I64, STEPS_DONE, Column, list_of
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import periodicity, spikes


class LossCurves(Collector):
    """The training loss of each step (kept on its device until read) and the validation (step, loss, accuracy)."""

    COLUMNS = (
        Column("steps", I64, "training steps the measurements rest on (backward passes seen)", per_budget=True),
        Column("first_loss", F64, "loss of the first batch, before any update", per_budget=True),
        Column("train_loss_curve", list_of(F64), "training loss at every step", along=EVERY_STEP),
        Column("nonfinite_losses", I64, "steps whose training loss was NaN or infinite", per_budget=True),
        Column("loss_spikes", I64, "how many steps' loss jumped far out of its recent range", per_budget=True),
        Column(
            "loss_spike_steps",
            list_of(I64),
            "steps (batch indices) whose loss jumped far out of its recent range",
            along=BATCH_INDICES,
        ),
        Column("loss_spike_period", F64, "most common gap between consecutive spikes", per_budget=True),
        Column("periodic_spikes", I64, "how many gaps between consecutive spikes equal that period", per_budget=True),
        Column("val_steps", list_of(I64), "steps at which validation ran (0 = before training)", along=STEPS_DONE),
        Column("val_loss_curve", list_of(F64), "validation loss at val_steps", along="val_steps"),
        Column("val_acc_curve", list_of(F64), "validation accuracy at val_steps", along="val_steps"),
    )

    def __init__(self, loop: Loop):
        self.loop = loop
        self.losses: list[torch.Tensor] = []  # detached, so the loop never waits on a device sync
        self.validation: list[tuple[int, float, float]] = []
        self._spikes_found: list[int] = []  # the spikes of the first `_spikes_upto` losses, measured already
        self._spikes_upto = 0

    def after_backward(self, loss: torch.Tensor) -> None:
        self.losses.append(loss.detach())

    @property
    def first_loss(self) -> float:
        """The loss of the first batch (a read back to the host: taken with the columns, never per step)."""
        return float(self.losses[0]) if self.losses else math.nan

    def log_validation(self, step: int, loss: float, accuracy: float) -> None:
        self.validation.append((step, loss, accuracy))

    def columns(self, final: bool) -> dict:
        losses = torch.stack(self.losses).double().cpu().tolist() if self.losses else []
        spike_steps = spikes(losses, found=self._spikes_found, start=self._spikes_upto)  # snapshots: extend, not redo
        self._spikes_found, self._spikes_upto = spike_steps, len(losses)
        period, periodic = periodicity(spike_steps)
        scalars = {
            "steps": self.loop.step + 1,
            "first_loss": self.first_loss,
            "nonfinite_losses": sum(not math.isfinite(v) for v in losses),
            "loss_spikes": len(spike_steps),
            "loss_spike_period": period,
            "periodic_spikes": periodic,
        }
        if not final:
            return scalars
        return {
            **scalars,
            "train_loss_curve": losses,
            "loss_spike_steps": spike_steps,
            "val_steps": [s for s, _, _ in self.validation],
            "val_loss_curve": [v for _, v, _ in self.validation],
            "val_acc_curve": [a for _, _, a in self.validation],
        }
