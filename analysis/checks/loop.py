"""The loop checks.

The loop's own mistakes: how it feeds, clears, switches mode, clips and hands the targets to the loss.
"""

from analysis.checks.base import BY_DEFINITION, Check, Harm

STARVED_LOADER = Check(
    verdict="starved_loader",
    needs_harm=False,
    feature="data_wait_ratio",
    above=True,
    evidence="the loop waited {value:.2g}s for data per second of its own compute (threshold {threshold:.2g})",
    next_step="feed the model faster: DataLoader num_workers > 0, pin_memory=True, prefetching, or cache decoded data",
    advice="loader_next_step",  # the doctor knows the loader's workers: one that has some is told other fixes
    order=10,
    parts=("batches",),
    harm=Harm("time", slower=1.5),
)

NO_ZERO_GRAD = Check(
    verdict="no_zero_grad",
    needs_harm=False,
    feature="grad_carried_share",
    above=True,
    evidence="after {value:.0%} of optimizer steps the next backward pass added to gradients not cleared since"
    " the step (threshold {threshold:.0%}; backward passes per optimizer step: {backwards_per_step:.0f})",
    next_step="call optimizer.zero_grad() after every optimizer.step() (when accumulating on purpose, after"
    " the step that ends each group)",
    order=40,
    parts=("train",),
)

WRONG_MODE = Check(
    verdict="wrong_mode",
    needs_harm=False,
    feature="wrong_mode_share",
    above=True,
    evidence="{value:.0%} of training forwards ran in eval mode, or of evaluation forwards in training mode, in a"
    " model with dropout or BatchNorm (threshold {threshold:.0%})",
    next_step="call model.train() before training steps and model.eval() before validation (and back again)",
    order=50,
    parts=("train",),
    harm=BY_DEFINITION,
)

OVER_CLIPPED = Check(
    verdict="over_clipped",
    needs_harm=False,
    feature="grad_kept_at_step",
    above=False,
    evidence="the gradients reached the optimizer at {value:.1e} of their norm after backward (median over the"
    " steps measured; {clipped_step_share:.0%} of those steps clipped; threshold {threshold:.1e})",
    next_step="with a GradScaler, call scaler.unscale_(optimizer) before clip_grad_norm_ (clipping the scaled"
    " gradients cuts them to max_norm / scale); without one, raise max_norm above the usual gradient norm",
    order=60,
    parts=("train",),
    # clipping and loss scaling are the loop's (Keras writes it)
    fault_types=(),
    harm=BY_DEFINITION,
)

TARGETS_CHANGED_IN_LOOP = Check(
    verdict="targets_changed_in_loop",
    needs_harm=True,
    feature="targets_changed_share",
    above=True,
    evidence="{value:.0%} of the target rows the loss received differ from the rows the batch handed over"
    " (threshold {threshold:.0%}): the targets were re-ordered or changed inside the loop, apart from their"
    " inputs",
    next_step="look at what the loop does to the targets between the batch and the loss: an index, sort or"
    " shuffle applied to the targets and not to the inputs; a mix-up must mix inputs and targets with the same"
    " pairs",
    order=100,
    # what the loop does to the targets before the loss
    parts=("train",),
    # the loop hands the targets to the loss (Keras does)
    fault_types=(),
)

CHECKS = (
    STARVED_LOADER,
    NO_ZERO_GRAD,
    WRONG_MODE,
    OVER_CLIPPED,
    TARGETS_CHANGED_IN_LOOP,
)
