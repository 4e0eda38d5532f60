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

CHECKS = (ANSWER_LEAK,)
