"""The outputs checks.

The model's output and the loss: probabilities where logits belong, bounded or constant outputs, a loss that does
not fit the targets.
"""

from analysis.checks.base import BY_DEFINITION, Check, Harm
from analysis.yardsticks import FLOORED_LOGITS

# Facts about what the loss itself received (harness/instruments/loss_inputs.py reads its arguments, whatever
# computed them: a decoder in training_step, a reshape in the loop, a functional loss). Their thresholds are facts,
# not fits: each reading is 0 on a loss handed what it is built for, whatever the model, data or optimizer, and
# judged ahead of the fitted rules in the grid and the doctor alike (the rules read measurements these faults make
# meaningless: a loss that is not the task's).

# nll_loss takes log-probabilities, which are never above 0 (log_softmax's output): every value above 0 says it
# got something else, probabilities from a softmax (its loss then goes negative: -p rather than -log p) or raw
# scores (unbounded below). Over 1% of the values is the threshold: one value by rounding (log_softmax is exact at
# its largest entry, -log of a sum of at least 1) never makes a share; the fault makes all of them (a softmax) or
# about half (raw scores).
NLL_ON_PROBABILITIES = Check(
    verdict="nll_on_probabilities",
    needs_harm=False,
    feature="nll_input_positive_share",
    above=True,
    evidence="{value:.0%} of the values handed to nll_loss were above 0 (over {threshold:.0%} is the fault:"
    " log-probabilities never are), and the loss went as low as {likelihood_loss_min:.3g} (a negative"
    " log-likelihood is never below 0): the loss got probabilities or raw scores where it takes log-probabilities",
    next_step="end the model in log_softmax (nn.LogSoftmax(dim=1)) before NLLLoss, or return the logits and use"
    " cross_entropy (nn.CrossEntropyLoss), which applies log_softmax itself; never softmax before NLLLoss",
    order=4,  # a fact, judged ahead of the fitted rules, after the language facts (2, 3)
    fact=0.01,
    in_grid=True,  # the grid's cells read their loss's inputs too (harness/instruments/loss_inputs.py)
    parts=("model", "loss"),
    fault_types=("act", "loss"),
    harm=BY_DEFINITION,  # the loss is not a likelihood at all: it rewards the wrong thing whatever the accuracy
)

# A loss that takes raw scores (cross_entropy, BCE-with-logits) needs them free to go down as well as up: a ReLU
# or clamp(min=0) on the logits (as the last module, a torch.relu in forward, or applied in the loop) leaves every
# score it cuts at exactly 0 with no gradient through it, so those classes can never be pushed down or back up,
# and with BCE no output can say "no". Continuous scores are never exactly 0 (a healthy head's, a sigmoid's, or a
# model's that ignores its input, whose rows are alike); a floor holds a large share (half of a fresh model's).
# The threshold, FLOORED_LOGITS (analysis/yardsticks.py, which keeps the capacity evidence off such runs), is 5%.
CLAMPED_LOGITS = Check(
    verdict="clamped_logits",
    needs_harm=False,
    feature="logit_floor_share",
    above=True,
    evidence="{value:.0%} of the scores the loss ({loss_read}) received were exactly 0 with none below 0 (over"
    " {threshold:.0%} is the fault): a ReLU or clamp on the logits, so those scores get no"
    " gradient, and classes cut to the floor can never win",
    next_step="remove the ReLU or clamp after the last layer (a torch.relu on the logits in forward or in the loop"
    " included): cross_entropy and BCEWithLogitsLoss take raw scores of any sign",
    order=6,  # a fact (5 is left to the worked example of docs/architecture.md); model_too_small never reads such a run
    fact=FLOORED_LOGITS,
    in_grid=True,  # the grid's cells read their loss's inputs too (harness/instruments/loss_inputs.py)
    parts=("model",),
    fault_types=("act",),
    harm=BY_DEFINITION,  # the loss cannot reach its optimum whatever the accuracy says
)

# An elementwise loss (mse, l1, BCE, ...) broadcasts a prediction and a target of different shapes: an output of
# (B, 1) against targets of (B,) compares every output with every target, B x B pairs, and the model learns the
# targets' mean. Any factor above 1 is the fault: equal shapes compare one element each, and a broadcast that
# only repeats a target (one value for a whole row) keeps the larger argument's size, a factor of 1.
LOSS_BROADCAST = Check(
    verdict="loss_broadcast",
    needs_harm=False,
    feature="loss_broadcast_factor",
    above=True,
    evidence="the loss ({loss_read}) received a prediction and a target of different shapes, {loss_shapes}, and"
    " broadcast them to {value:.3g} times as many comparisons as either holds (over {threshold:.3g} is the"
    " fault): it compares every prediction with other examples' targets, not one with its own",
    next_step="give the prediction and the target the same shape before the loss (output.squeeze(-1) for a"
    " single output unit, or target.view_as(output)); PyTorch's warning 'Using a target size that is"
    " different to the input size' is this",
    order=7,  # a fact, ahead of ignores_inputs (8): a loss that pairs every output with the batch's mean target
    # trains a model whose output no longer depends on its input, which is what ignores_inputs would then read
    fact=1.0,
    in_grid=True,  # the grid's cells read their loss's inputs too (harness/instruments/loss_inputs.py)
    parts=("loss", "train"),
    fault_types=("loss",),
    harm=BY_DEFINITION,  # the loss is not the task's: it pairs predictions with the wrong targets
)


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
    NLL_ON_PROBABILITIES,
    CLAMPED_LOGITS,
    LOSS_BROADCAST,
    DOUBLE_SOFTMAX,
    SQUASHED_LOGITS,
    BCE_ON_SINGLE_LABEL,
    CONSTANT_OUTPUT,
    UNREACHABLE_TARGETS,
)
