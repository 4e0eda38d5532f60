"""The parameters checks.

What the optimizer is given and does to the weights: frozen, never stepped, decayed away.
"""

from analysis.checks.base import Check

FROZEN_PARAMS = Check(
    verdict="frozen_params",
    needs_harm=True,
    feature="no_grad_share",
    above=True,
    evidence="{value:.0%} of parameter elements never got a gradient (threshold {threshold:.0%})",
    next_step="look for requires_grad=False, .detach() or torch.no_grad() in forward, and what the optimizer was given",
    order=20,
    # requires_grad=False in the model, or parameters left out
    parts=("model", "optimizer"),
    # trainable=False is a layer's property
    fault_types=("layer_props",),
)

PARAMS_NOT_UPDATED = Check(
    verdict="params_not_updated",
    needs_harm=True,
    feature="unmoved_share",
    above=True,
    evidence="{value:.0%} of the parameter elements that got gradients were never moved by an optimizer step"
    " (threshold {threshold:.0%}): the optimizer steps other tensors than the trained model's",
    next_step="build the optimizer from the model you train, after the model is final (after .to(device),"
    " wrapping or replacing layers): optimizer = Adam(model.parameters()); check that every trained module's"
    " parameters are in optimizer.param_groups",
    order=30,
    # the optimizer built before the model was final
    parts=("model", "optimizer"),
    # the loop's optimizer and model (Keras builds both together)
    fault_types=(),
)

# A tensor that got gradients and ended the run bit for bit as it began, while the others trained: nothing stepped
# it. A fact, not fitted: one whole layer left out (`Adam(net[0].parameters())`, the output layer never trained) is
# a small share of the parameters (0.135 on the MLP, under params_not_updated's fitted 0.55), and any
# number of such tensors is the fault. Judged by the doctor (a whole-run reading of the watched model); the grid's
# cells measure it too, where its planted params_not_updated sizes are judged by the fitted rule.
PARAMS_LEFT_OUT = Check(
    verdict="params_left_out",
    needs_harm=False,
    feature="unchanged_param_count",
    above=True,
    evidence="{value:.0f} parameter tensor(s) got gradients but ended the run bit for bit as they began, while the"
    " others trained: {unchanged_param_names}; nothing stepped them",
    next_step="give the optimizer every parameter you train: Adam(model.parameters()), not a submodule's, built"
    " after the model is final; check that each tensor named is in optimizer.param_groups (a tensor you mean to"
    " freeze: set requires_grad=False, so it gets no gradient)",
    order=12,
    fact=0.5,
    parts=("optimizer", "model"),
    fault_types=("opt",),
)

WEIGHT_DECAY_DOMINATES = Check(
    verdict="weight_decay_dominates",
    needs_harm=True,
    feature="weight_norm_ratio",
    above=False,
    evidence="the weight matrices ended at {value:.2g}x their starting norm (threshold {threshold:.2g}x) while the"
    " run fell short: each step's weight decay took away more than the gradient built",
    next_step="lower weight_decay: rate x weight_decay is the share the weights shrink per step (AdamW's default"
    " 0.01 at 1e-3 is 1e-5); with Adam, weight_decay is an L2 term in the gradient (use AdamW for decoupled"
    " decay)",
    order=90,
    parts=("optimizer",),
    # DeepFD's type for the optimizer and its settings other than the rate
    fault_types=("opt",),
)

CHECKS = (
    PARAMS_LEFT_OUT,
    FROZEN_PARAMS,
    PARAMS_NOT_UPDATED,
    WEIGHT_DECAY_DOMINATES,
)
