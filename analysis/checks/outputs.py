"""The outputs checks.

The model's output and the loss: probabilities where logits belong, bounded or constant outputs, a loss that does
not fit the targets.
"""

from analysis.checks.base import BY_DEFINITION, Check, Harm

DOUBLE_SOFTMAX = Check(
    verdict="double_softmax",
    needs_harm=False,
    feature="output_prob_share",
    above=True,
    evidence="{value:.0%} of the output rows handed to the loss were already probabilities (threshold {threshold:.0%})",
    next_step="return logits from the model: cross_entropy applies log_softmax itself (or use NLLLoss on log_softmax)",
    order=110,
    parts=("model",),
    # a softmax layer in front of a loss that applies its own
    fault_types=("act",),
    harm=BY_DEFINITION,
)

SQUASHED_LOGITS = Check(
    verdict="squashed_logits",
    needs_harm=False,
    feature="logit_reach_span",
    above=False,
    evidence="the outputs handed to a loss that applies its own softmax ({loss_kind}) never got more than"
    " {value:.3g} apart, even with the inputs and the output layer scaled up 1000x (threshold {threshold:.3g}):"
    " an activation after the last layer bounds them (the model's last module: {output_layer}), so no class"
    " can get much of the probability",
    next_step="remove the activation after the last layer (a sigmoid or tanh): cross_entropy takes raw logits;"
    " for yes/no per class, use BCEWithLogitsLoss on those logits instead",
    order=120,
    parts=("model",),
    # a sigmoid or tanh on the outputs a softmax loss takes as logits
    fault_types=("act",),
    harm=BY_DEFINITION,
)

BCE_ON_SINGLE_LABEL = Check(
    verdict="bce_on_single_label",
    needs_harm=False,
    feature="single_label_bce",
    above=True,
    evidence="the loss ({loss_kind}) computes binary cross-entropy, a yes/no per output unit, while every target"
    " row holds one class among {classes:.0f} (threshold {threshold:.2g}): most targets are no, and nothing"
    " makes the outputs choose one class",
    next_step="use cross_entropy on the logits (nn.CrossEntropyLoss, class indices or the one-hot rows) for one"
    " class per example; keep binary cross-entropy (BCEWithLogitsLoss) for multi-label targets",
    order=130,
    parts=("loss",),
    # binary cross-entropy where one class per example needs cross-entropy
    fault_types=("loss",),
    harm=Harm("definition", from_classes=3),
)

CONSTANT_OUTPUT = Check(
    verdict="constant_output",
    needs_harm=False,
    feature="output_spread",
    above=False,
    evidence="the model gives every input the same output: its spread across a batch is {value:.2g} of its"
    " size (threshold {threshold:.2g}); the model's last module is {output_layer}",
    next_step="look at the model's last layer: a softmax over one unit is always 1 and a ReLU on the output dies"
    " at 0; end a classifier in logits (one unit with a sigmoid for two classes), a regression in a linear"
    " layer",
    order=230,
    parts=("model",),
    # the last layer's activation (a softmax over one unit, a dead ReLU output)
    fault_types=("act",),
)

UNREACHABLE_TARGETS = Check(
    verdict="unreachable_targets",
    needs_harm=False,
    feature="target_reach_gap",
    above=True,
    evidence="{value:.0%} of the targets lie outside what the output can produce (after the loss's own softmax or"
    " sigmoid, where it applies one), even with the inputs scaled 1000x (threshold {threshold:.0%}); the"
    " model's last module is {output_layer}; the loss: {loss_kind}",
    next_step="match the output activation and the loss to the targets: no activation and mean squared error for"
    " regression, a sigmoid (BCEWithLogitsLoss) for 0/1 or multi-label targets, a softmax (cross_entropy) only for"
    " one class per example; or rescale the targets into the output's range",
    order=240,
    parts=("model", "loss"),
    # the output's activation, or the one the loss applies itself (cross-entropy's softmax), cannot produce the
    # targets: either the last layer or the loss is what to change
    fault_types=("act", "loss"),
)

CHECKS = (
    DOUBLE_SOFTMAX,
    SQUASHED_LOGITS,
    BCE_ON_SINGLE_LABEL,
    CONSTANT_OUTPUT,
    UNREACHABLE_TARGETS,
)
