"""The initialization checks.

What the model computes before it learns: inputs at a large scale, dead, exploding, vanishing or saturated
activations, read at initialization.
"""

from analysis.checks.base import Check

UNSCALED_INPUTS = Check(
    verdict="unscaled_inputs",
    needs_harm=True,
    feature="input_rms",
    above=True,
    evidence="inputs have an RMS of {value:.3g} (threshold {threshold:.3g}); the first loss was {first_loss:.3g}"
    " against ln C = {ln_classes:.2f}",
    next_step="check the input statistics: standardize features, scale pixels to [0, 1]",
    order=140,
    parts=("batches",),
    fault_types=("missing_prep",),
)

DEAD_RELU = Check(
    verdict="dead_relu",
    needs_harm=True,
    feature="dead_at_init",
    above=True,
    evidence="{value:.0%} of ReLU units never active at initialization (threshold {threshold:.0%})",
    next_step="check the initialization (biases, weight scale); consider LeakyReLU or a lower rate",
    order=150,
    parts=("model",),
    fault_types=("act", "init"),
)

EXPLODING_GRADIENTS = Check(
    verdict="exploding_gradients",
    needs_harm=True,
    feature="activation_growth",
    above=True,
    evidence="at initialization the last activations were {value:.3g}x the first ones' in RMS (threshold"
    " {threshold:.3g}x); the first loss was {first_loss:.3g} against ln C = {ln_classes:.2f}",
    next_step="use a variance-preserving initialization (Kaiming for ReLU), add normalization layers, clip gradients",
    order=160,
    parts=("model",),
    fault_types=("init",),
)

VANISHING_GRADIENTS = Check(
    verdict="vanishing_gradients",
    needs_harm=True,
    feature="grad_depth_ratio",
    above=False,
    evidence="at initialization the first layer's gradient was {value:.2g}x the last layer's (threshold"
    " {threshold:.2g}x)",
    next_step="use ReLU-family activations, residual connections or normalization; check the initialization",
    order=170,
    parts=("model",),
    fault_types=("act", "init"),
)

SATURATED_ACTIVATIONS = Check(
    verdict="saturated_activations",
    needs_harm=True,
    feature="saturated_at_init",
    above=True,
    evidence="{value:.0%} of tanh/sigmoid outputs within 1% of their bounds at initialization (threshold"
    " {threshold:.0%})",
    next_step="scale the initial weights down (Xavier/Glorot for tanh), standardize inputs, or use a"
    " non-saturating activation",
    order=180,
    parts=("model",),
    fault_types=("act", "init"),
)

CHECKS = (
    UNSCALED_INPUTS,
    DEAD_RELU,
    EXPLODING_GRADIENTS,
    VANISHING_GRADIENTS,
    SATURATED_ACTIVATIONS,
)
