"""The language family's features: a next-token model's loss against what a table or a compressor reaches.

Read by the checks of analysis/checks/language.py and by the outcome gate (`loss_over_counts`, `counts_noise`).
"""

from analysis.feature import Feature
from analysis.yardsticks import counts_noise, loss_over_counts, loss_under_compressor

DECLARED = (
    Feature(
        "loss_under_compressor",
        "the lower of the final training and validation losses over lzma's rate on the validation text (nats per byte)",
        "a compressor's rate on the same text: what the text allows, for any text and vocabulary of bytes",
        True,
        loss_under_compressor,
        reads=("final_train_loss", "final_val_loss", "lm_compressor_val_loss"),
    ),
    Feature(
        "loss_over_counts",
        "the final validation loss (else training) over the better of the unigram and bigram counts' on the same"
        " text (the outcome gate's measurement on next-token tasks)",
        "counts of each token and of which token follows which on the training text: what a table reaches, any text",
        True,
        loss_over_counts,
        reads=("final_val_loss", "final_train_loss", "lm_bigram_val_loss", "lm_unigram_val_loss"),
    ),
    Feature(
        "counts_noise",
        "the token counts' validation loss's standard error over that loss (the sampling error of loss_over_counts)",
        "the counts' own validation loss",
        True,
        counts_noise,
        reads=("lm_bigram_val_loss", "lm_counts_val_se", "lm_unigram_val_loss"),
    ),
)
