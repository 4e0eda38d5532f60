"""The numeric checks: a loss that went NaN or inf, and a GradScaler that skipped most steps.

Their thresholds are facts, not fits: any non-finite training loss is a finding, and a run whose GradScaler skipped
most optimizer steps barely trained. They read record columns (`nonfinite_losses`, `amp_skipped_share`), are
judged before every fitted rule (whose measurements are read on a model that no longer computes numbers), and
only the doctor judges them: the instruments' non-finite watch (harness/instruments/nonfinite.py, which the doctor
turns on) finds what was non-finite first, and the next step depends on it (`NEXT_STEPS`).
"""

from analysis.checks.base import Check, Place

# What to look at, by what was non-finite first.
NEXT_STEPS = {
    "inputs": "the data: find the NaN/inf in the inputs (a missing value, a division by a zero standard deviation in"
    " the normalization, a corrupt file) and fix or drop those examples; torch.isfinite(x).all() on each batch"
    " finds them",
    "weights at initialization": "the initialization: custom init code produced NaN/inf weights (a division by a zero"
    " fan-in, a NaN scale, weights loaded from a broken checkpoint)",
    "weights": "the optimizer's update: it made the weights non-finite from finite gradients; lower the learning rate,"
    " check the optimizer's settings (eps=0, a huge weight decay or momentum), or clip gradients",
    "gradients": "the backward pass: an operation with an infinite derivative (sqrt or norm at 0, log or pow near 0) or"
    " an overflow; lower the rate and clip gradients (torch.nn.utils.clip_grad_norm_), and run one step under"
    " torch.autograd.set_detect_anomaly(True) to name the operation",
    "outputs": "the model's forward: it overflowed on finite inputs and weights (exp, division or log in forward,"
    " activations growing layer after layer, weights grown by a rate too high); check the initialization, lower the"
    " rate, add normalization or clip gradients",
    "outputs or loss": "the model's forward or the loss function: look for exp, division or log in either, and for"
    " weights grown by a rate too high",
    "loss": "the loss function: it returned NaN/inf on finite outputs (log of 0, e.g. log(softmax) instead of"
    " log_softmax, a division by zero, sqrt of a negative); add an epsilon or use the stable built-in"
    " (cross_entropy on logits)",
}

NONFINITE_LOSS = Check(
    verdict="nonfinite_loss",
    needs_harm=False,
    feature="nonfinite_losses",
    above=True,
    # Filled with where it began (the watch's Origin: doctor/nonfinite.py, finding).
    evidence="the training loss was first {first_value} at step {loss_step} ({value:.0f} of {steps} training losses"
    " were NaN or inf); non-finite first: the {what}: {detail}",
    supplied=("first_value", "loss_step", "what", "detail"),
    next_step="look at what was non-finite first, named in the evidence (NEXT_STEPS gives what to look at for each)",
    order=0,
    fact=0.0,
    place=Place.NONFINITE,  # found by the caller's watch, which supplies where it began
    # Where the NaN came from is in its evidence (weights, inputs, outputs or the loss), not one recipe part or
    # fault type.
    parts=(),
    fault_types=(),
)

AMP_STEPS_SKIPPED = Check(
    # The GradScaler skipped most optimizer steps: gradients inf or NaN while the loss stayed finite. A scaler halves
    # its scale at each skipped step and grows it again only after 2000 clean ones, so a scale collapsing toward
    # zero is the same finding. Without a scaler the same gradients would make the weights NaN (nonfinite_loss);
    # with one the run goes on quietly, learning nothing.
    verdict="amp_steps_skipped",
    needs_harm=False,
    feature="amp_skipped_share",
    above=True,
    evidence="the GradScaler skipped {value:.0%} of optimizer steps because their gradients held inf or NaN, though"
    " the loss was finite; its scale fell to {amp_scale_min:.2g} (it starts at 65536 and halves at each skipped"
    " step)",
    next_step=f"look at {NEXT_STEPS['gradients']}",
    order=1,
    fact=0.5,  # by definition, not fitted: a run whose GradScaler skipped most steps barely trained
    place=Place.NUMERIC,
    parts=("train",),
    fault_types=(),  # mixed precision is the loop's (Keras writes it)
)

CHECKS = (NONFINITE_LOSS, AMP_STEPS_SKIPPED)
