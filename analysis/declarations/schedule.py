"""The schedule family's features: the rate the steps used, the steps' size, and whether more steps would pay.

Read by the checks of analysis/checks/schedule.py (and `update_ratio` by the naive `lr_too_high`).
"""

from analysis.feature import Feature, column
from analysis.loss_curves import forecast_gain, steps_without_progress

DECLARED = (
    Feature(
        "lr_peak_share",
        "the highest rate an optimizer step used, over the rate the optimizer was built with",
        "the optimizer's own rate (a scheduler's initial_lr): 1 exactly without a schedule, whatever the rate",
        True,
        lambda m: column(m, "lr_peak_share"),
        reads=("lr_peak_share",),
    ),
    Feature(
        "lr_decayed_share",
        "share of optimizer steps run at under 5% of the highest rate a step had used before them",
        "the run's own peak rate and its optimizer steps: any rate, any schedule, any length",
        False,
        lambda m: column(m, "lr_decayed_share"),
        reads=("lr_decayed_share",),
    ),
    Feature(
        "forecast_gain",
        "more of the training loss's fall forecast by 4x the steps, as a share of its fall so far",
        "the run's own fall and length: a share of what it has already gained, on any loss and run length",
        False,
        forecast_gain,
        reads=("train_loss_curve",),
    ),
    Feature(
        "update_ratio_peak",
        "largest per-step median, over the weight matrices, of update norm over weight norm",
        "the weights' own size: reads the step the optimizer takes, whatever its kind",
        True,
        lambda m: column(m, "update_ratio_peak"),
        reads=("update_ratio_peak",),
    ),
    Feature(
        "steps_without_progress",
        "largest per-step median update ratio of the weight matrices times the share of the first loss left at the end",
        "the weights' own size and the run's own first loss: large steps that brought the loss down are no fault",
        True,
        steps_without_progress,
        reads=("final_train_loss", "first_loss", "update_ratio_peak"),
    ),
    Feature(
        "update_ratio",
        "median of update norm over weight norm per step, over the weight matrices",
        "the weights' own size",
        True,
        lambda m: column(m, "update_ratio_median"),
        reads=("update_ratio_median",),
    ),
)
