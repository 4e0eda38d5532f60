"""The schedule checks.

The learning rate and the run's length: a schedule that never rises or dies early, a rate too high or too low, a run
stopped while still improving.
"""

from analysis.checks.base import Check

WARMUP_NEVER_ENDS = Check(
    verdict="warmup_never_ends",
    needs_harm=True,
    feature="lr_peak_share",
    above=False,
    evidence="no optimizer step used more than {value:.1%} of the rate the optimizer was built with"
    " ({lr_built:.2g}; threshold {threshold:.0%}): the schedule never brought the rate up",
    next_step="check the schedule: a warmup given in steps where it counts epochs (or the reverse), or"
    " scheduler.step() called once per epoch for a per-step schedule; log optimizer.param_groups[0]['lr']",
    order=70,
    # the scheduler is built and stepped in the loop
    parts=("train",),
    # a schedule is the learning rate's
    fault_types=("lr",),
)

RATE_DECAYED_EARLY = Check(
    verdict="rate_decayed_early",
    needs_harm=True,
    feature="lr_decayed_share",
    above=True,
    evidence="{value:.0%} of the optimizer steps ran at under 5% of the highest rate the run had used (threshold"
    " {threshold:.0%}; the last step's rate was {lr_last_share:.1e} of the built one): the schedule stopped the"
    " training early",
    next_step="check where scheduler.step() is called: a per-epoch schedule (StepLR, ExponentialLR, MultiStepLR)"
    " stepped in the batch loop decays the rate once per batch; or give the schedule its length in optimizer"
    " steps. Log optimizer.param_groups[0]['lr']",
    # A schedule that ends by decaying to 0 spends its last steps there by design: a cosine over the run its
    # last 14% (cos(pi t) < -0.9 for t > 0.856), a linear decay its last 5%. Under a fifth, the reading cannot
    # tell a rate killed early from a schedule that ended.
    bound=0.2,
    order=80,
    # scheduler.step() is called in the loop
    parts=("train",),
    fault_types=("lr",),
)

LR_TOO_HIGH = Check(
    verdict="lr_too_high",
    needs_harm=True,
    feature="steps_without_progress",
    above=True,
    evidence="the largest steps moved the weights by {update_ratio_peak:.1e} of their size while the loss ended at"
    " {loss_left:.0%} of its first value: {value:.1e} (threshold {threshold:.1e})",
    next_step="lower the learning rate 10x (or add warm-up)",
    order=220,
    parts=("optimizer",),
    fault_types=("lr",),
)

LR_TOO_LOW = Check(
    verdict="lr_too_low",
    needs_harm=True,
    feature="update_ratio_peak",
    above=False,
    evidence="the largest steps moved the weights by {value:.1e} of their size (threshold {threshold:.1e})",
    next_step="raise the learning rate 10x and watch the loss",
    order=250,
    parts=("optimizer",),
    fault_types=("lr",),
)

STILL_IMPROVING = Check(
    verdict="still_improving",
    needs_harm=True,
    feature="forecast_gain",
    above=True,
    evidence="the loss was still falling when the run stopped: a learning curve fitted to it forecasts another"
    " {value:.0%} of its fall so far by 4x the steps (threshold {threshold:.0%}); {forecast_line}",
    next_step="train longer (more epochs) and watch the validation loss; if that takes too long, raise the"
    " learning rate",
    # The gain is a share of what the run has already gained; under a tenth of it the curve has mostly
    # flattened, and a fit that reaches lower (at 50 steps it would fire on every run) says nothing. The rule
    # needs harm: a run that reached the references gains little that matters from going on.
    bound=0.1,
    order=260,
    # epochs are counted in the loop (or the probe's STEPS)
    parts=("train", "STEPS"),
    fault_types=("epoch",),
)

CHECKS = (
    WARMUP_NEVER_ENDS,
    RATE_DECAYED_EARLY,
    LR_TOO_HIGH,
    LR_TOO_LOW,
    STILL_IMPROVING,
)
