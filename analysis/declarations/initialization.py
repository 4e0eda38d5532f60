"""The initialization family's features: the inputs' scale, and the network as it starts, before any step.

Read by the checks of analysis/checks/initialization.py (and `first_loss_ratio` by the naive `unscaled_inputs`).
"""

from analysis.feature import Feature, column, ratio

DECLARED = (
    Feature(
        "input_rms",
        "root mean square of the inputs",
        "the unit scale of standardized features, the scale every initialization assumes",
        True,
        lambda m: column(m, "input_rms"),
        reads=("input_rms",),
    ),
    Feature(
        "first_loss_ratio",
        "first loss over ln C",
        "ln C, the loss of a uniform guess",
        True,
        lambda m: ratio(column(m, "first_loss"), column(m, "ln_classes")),
        reads=("first_loss", "ln_classes"),
    ),
    Feature(
        "dead_at_init",
        "share of ReLU units never active at initialization",
        "the ReLU units on a probe batch: any width and depth",
        False,
        lambda m: column(m, "dead_unit_share_init"),
        reads=("dead_unit_share_init",),
    ),
    Feature(
        "activation_growth",
        "RMS of the last activations over the first ones', at initialization",
        "the first activations' RMS: growth through depth, whatever the input scale",
        True,
        lambda m: column(m, "activation_growth_init"),
        reads=("activation_growth_init",),
    ),
    Feature(
        "grad_depth_ratio",
        "gradient norm of the first weight matrix over the last one's, at initialization",
        "the last weight matrix's gradient: whatever the loss scale",
        True,
        lambda m: column(m, "grad_depth_ratio_init"),
        reads=("grad_depth_ratio_init",),
    ),
    Feature(
        "saturated_at_init",
        "share of tanh/sigmoid outputs within 1% of their bounds, at initialization",
        "the tanh/sigmoid outputs on a probe batch",
        False,
        lambda m: column(m, "saturated_share_init"),
        reads=("saturated_share_init",),
    ),
)
