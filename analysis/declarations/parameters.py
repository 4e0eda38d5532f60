"""The parameters family's features: which parameters got a gradient, moved, and how their norm changed.

Read by the checks of analysis/checks/parameters.py.
"""

from analysis.feature import Feature, column

DECLARED = (
    Feature(
        "no_grad_share",
        "share of parameter elements that never got a gradient",
        "the parameter count: any model size",
        False,
        lambda m: column(m, "params_without_grad_share"),
        reads=("params_without_grad_share",),
    ),
    Feature(
        "weight_norm_ratio",
        "joint norm of the weight matrices at the last measured step over their norm at the first",
        "the weights' own starting norm: any width, depth or initialization",
        True,
        lambda m: column(m, "weight_norm_ratio"),
        reads=("weight_norm_ratio",),
    ),
    Feature(
        "unmoved_share",
        "share of parameter elements with a gradient that no measured optimizer step moved",
        "the parameter count: any model size (only parameters that got a gradient are read)",
        False,
        lambda m: column(m, "unmoved_share"),
        reads=("unmoved_share",),
    ),
)
