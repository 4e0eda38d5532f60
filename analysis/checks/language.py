"""The language-modelling checks: what a next-token loss says about the text it is read against.

`ANSWER_LEAK`: the loss fell far below what the text allows, because the answer is in the input (no causal mask:
a position attends to the byte it must predict; targets not shifted: the target is the input at the same
position). It is read against a compressor's rate on the same validation text (harness/text.py:
`lm_compressor_val_loss`, lzma at its strongest setting, in nats per byte).

Its threshold is principled, not fitted: the feature is NaN on every run `make fit` fits on (digits and the
generated problems have no text), so the fit keeps the committed value, 0.25 at every budget. Why a quarter: lzma
knows nothing of Python, so a model may beat it, but to beat it by four times (about 0.6 bits per byte on the
standard library's source, where lzma needs about 2.4) it would predict each byte of files it never saw about as
well as the lowest estimates of the entropy of written English by human readers (Shannon, 1951: 0.6 to 1.3 bits
per character), never mind a model of a few hundred thousand parameters trained for minutes. A leak drives the
loss to about 0. The language-model runs of `make families` are evaluation data: they were not read to set it.

`FUTURE_VISIBLE`: a model that sees the tokens after a position (no causal mask), told apart by where its loss is
high rather than by how low it is. A leak need not take the whole loss under a quarter of lzma's rate in a short
run: a small model may still be learning to copy. Where the positions sit shows it all the same. Every position
but the window's last has its target in view (the next byte is in the window), so its loss falls towards 0. The
last position's target lies beyond the window, so it must be predicted as in a healthy model. The feature is the
loss at the last position over the loss at the others (harness/instruments/outputs.py: the median over the census
steps of the run's last quarter).

Its threshold, 1.5 at every budget, is principled and not fitted: `make fit` has no text, so the feature is NaN on
every run it fits on. Why 1.5:
- A model that reads only the tokens before a position has its most context at the last position. Its loss there
  is no higher than the average of the others, so the ratio is at most about 1. The others include the first
  position, which has no context at all.
- Half as much again is beyond what noise on thousands of positions makes.
- Seeing the future leaves the last position with all of its loss and the others with little.
It comes after `ANSWER_LEAK`: a loss far under what the text allows already says the answer is in the input, and
its next step names the causal mask too. With targets equal to the inputs (not shifted), every position, the last
included, copies its own input. The losses of the ratio are then tiny and say nothing; that run is `ANSWER_LEAK`'s.
It was set before any language-model run was read with it.
"""

from analysis.checks.base import BY_DEFINITION, Check

ANSWER_LEAK = Check(
    verdict="answer_leak",
    needs_harm=False,
    feature="loss_under_compressor",
    above=False,
    evidence="the loss fell to {value:.0%} of lzma's rate on the same validation text ({lm_compressor_val_loss:.2f}"
    " nats per byte; threshold {threshold:.0%}): below what the text allows, so the answer is in the input",
    next_step="check that each position sees only the tokens before it (a causal attention mask) and that the"
    " targets are the inputs shifted by one (labels[t] = tokens[t + 1]), in training and evaluation",
    order=15,  # after starved_loader (10): a loop that waits for data is named first, as it is on any task
    parts=("model", "batches"),
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,
)

FUTURE_VISIBLE = Check(
    verdict="future_visible",
    needs_harm=False,
    feature="last_position_loss_ratio",
    above=True,
    evidence="the loss at the last position of a window is {value:.1f}x the loss at its other positions (threshold"
    " {threshold:.1f}x): each of the others sees its own target, which only a model reading later tokens can",
    next_step="give self-attention a causal mask (is_causal=True, or a mask that is -inf above the diagonal) so that"
    " each position attends only to the positions before it, in training and evaluation alike",
    order=16,  # after answer_leak (15): a loss far under what the text allows says it more generally
    parts=("model",),
    fault_types=("layer_props",),
    harm=BY_DEFINITION,
)

# Padding counted in the loss: the loss scores targets at positions the padding mask drops (harness/instruments/
# padding.py counts them per training batch, in the grid's cells and under the doctor alike). Its threshold is a
# fact, not a fit: a pipeline that gives padding the loss's ignore_index leaves no scored position under a 0 of the
# mask in any batch, and one that does not leaves some in every batch that holds padding. So it fires where more
# than half of the batches holding padding (most of them) score some: the fault's own behaviour is all of them, and
# a stray batch (a real token that happens to sit under a 0 of the mask) cannot make most. Batches without padding
# say nothing either way; a run without any has no share (NaN) and is not judged.
PADDING_IN_LOSS = Check(
    verdict="padding_in_loss",
    needs_harm=False,
    feature="padding_scored_batch_share",
    above=True,
    evidence="the loss scored positions that the padding mask drops in {value:.0%} of the {padded_batches:.0f}"
    " training batches holding padding (over {threshold:.0%} is the fault: a pipeline that labels padding -100"
    " leaves none); {padding_scored_position_share:.1%} of the positions it scored were padding, so the model is"
    " trained to predict pad tokens and the loss averages over them",
    next_step="give the padding's labels the loss's ignore_index, -100 (labels.masked_fill(attention_mask == 0,"
    " -100), or a collator that does it: DataCollatorForLanguageModeling, DataCollatorForTokenClassification,"
    " DataCollatorForSeq2Seq); for a model whose pad token is also its end-of-text token, mask by the attention"
    " mask, not by the token id",
    order=2,  # a fact, judged ahead of the fitted rules, after the numeric facts (nonfinite_loss 0, amp 1)
    fact=0.5,
    in_grid=True,  # the grid's text cells count it too, by the pad byte (harness/cell.py)
    parts=("batches",),
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,  # the loss is not the task's whatever the accuracy says: the model trains on pad tokens
)

CHECKS = (PADDING_IN_LOSS, ANSWER_LEAK, FUTURE_VISIBLE)
