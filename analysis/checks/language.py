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

`FUTURE_VISIBLE`: a model that sees the tokens after a position (no causal mask), read from the model itself rather
than from its loss. A leak need not take the loss under a quarter of lzma's rate in a short run: a small model may
still be learning to copy. The probe (harness/instruments/causality.py) changes only the tokens from a cut on (the
median scored position: the window's middle) and measures how far the scored outputs before the cut move
(`future_token_effect`, over their RMS).

Its threshold, 0.01, is a fact and not fitted: a model that reads only earlier tokens computes the outputs before the
cut from the same inputs in the same way, so they do not move at all (0, or float rounding, about 1e-7 of their
scale in float32; an output that differs between two identical calls is not judged). A model that reads later
tokens moves them by a share of their own size: attention spreads over the changed part of the window. A hundredth
sits far from both. It is judged as a fact, ahead of the fitted rules and `ANSWER_LEAK`: it names the mechanism (the
mask) where `ANSWER_LEAK` names only the symptom. With targets equal to the inputs (not shifted) the labels are not
the next tokens, so the probe does not judge the run; that run is `ANSWER_LEAK`'s. The threshold was set from this
argument. The language-model runs of `make families` (evaluation data) had shown the loss-position ratio this
replaces missing the leak in two seeds of five, which is why the probe was built, but they were not read to set it.
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
    feature="future_token_effect",
    above=True,
    evidence="changing only the tokens from a cut on (the median scored position) moved the outputs before the cut by"
    " {value:.0%} of their RMS (over {threshold:.0%} is the fault: a model that reads only earlier tokens does not move"
    " them at all): a position reads the tokens after it, its own target among them",
    next_step="give self-attention a causal mask (is_causal=True, or a mask that is -inf above the diagonal) so that"
    " each position attends only to the positions before it, in training and evaluation alike",
    order=3,  # a fact, judged ahead of the fitted rules, after padding_in_loss (2)
    fact=0.01,
    in_grid=True,  # the grid's cells probe their model too (harness/instruments/causality.py)
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

CHECKS = (PADDING_IN_LOSS, FUTURE_VISIBLE, ANSWER_LEAK)
