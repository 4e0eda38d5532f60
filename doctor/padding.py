"""Padding counted in the loss: a sequence loss that scores positions the batch's attention mask drops.

A collator pads each batch's sequences to one length and marks the padding with `attention_mask == 0`; the
labels of those positions must be the loss's ignore_index (-100), or the loss scores the padding: the model is
trained to predict pad tokens (trivial after the first) and the loss it reports is an average over text and
padding alike. Nothing in the loss curve shows it; the batch does. The doctor reads, per training batch that
holds an attention mask under the key `attention_mask` (a Hugging Face batch, or `inputs=("input_ids",
"attention_mask")` in a plain loop) beside (batch, time) targets: whether any position the mask drops has a
target the loss scores (a class of the output other than the loss's ignore_index). With a causal shift (the
model scores the output at t against label t + 1) a target's position is that of its label, so the mask is
shifted as the targets are. A loss that ignores the pad label itself scores no padding: its `ignore_index` is read
where it has one, and otherwise the labels padding carries are tried on it (`ignored_by`) when the report is made.

The threshold is no fit (doctor/nonfinite.py makes its finding the same way, outside the fitted rules): a
collator that sets padding's labels to -100 leaves no scored position under a 0 of the mask in any batch, and one
that does not leaves some in every batch that holds padding. So the finding fires where more than half of the
batches that hold padding (`PADDED_BATCHES_SCORED`, most of them) score some of it: the fault's own behaviour is
all of them, and a stray batch (a real token that happens to sit under a 0 of the mask) cannot make most.
Batches without padding say nothing either way (their mask has no 0). The sums stay on the batch's device until
the report reads them, so the watch adds no host read to a training step.
"""

import math
from collections.abc import Callable, Iterable, Mapping

import torch

from analysis.checks.base import Finding
from harness.targets import in_classes, shifted

VERDICT = "padding_in_loss"
MASK_KEY = "attention_mask"  # where a batch's inputs keep the mask (Hugging Face's name)
# Most of the batches that hold padding: the fault scores padding in all of them, a correct collator in none.
PADDED_BATCHES_SCORED = 0.5
# The measurements' keys (in the report's measurements, beside the record's columns).
SHARE = "padding_scored_batch_share"  # of the batches holding padding, the share whose loss scores some of it
POSITIONS = "padding_scored_position_share"  # of the positions the loss scores, the share under a 0 of the mask
PADDED = "padded_batches"  # batches that held padding (a 0 in the attention mask)
NEXT_STEP = (
    "give the padding's labels the loss's ignore_index, -100 (labels.masked_fill(attention_mask == 0, -100), or a"
    " collator that does it: DataCollatorForLanguageModeling, DataCollatorForTokenClassification,"
    " DataCollatorForSeq2Seq); for a model whose pad token is also its end-of-text token, mask by the attention"
    " mask, not by the token id"
)


def attention_mask(inputs) -> torch.Tensor | None:
    """The batch's attention mask: its inputs' `attention_mask` where they are a dict holding one, else None."""
    mask = inputs.get(MASK_KEY) if isinstance(inputs, Mapping) else None
    return mask if torch.is_tensor(mask) and mask.dim() == 2 else None


class PaddingWatch:
    """Per training batch with an attention mask and (batch, time) targets: whether a dropped position is scored.

    `classes`: the output's classes (a target outside them is one the loss ignores); `ignore_index`: the loss's
    own, also ignored where it lies inside them; `shift`: the causal shift the targets are read with (0: none).
    """

    def __init__(self, classes: int, ignore_index: int, shift: int = 0):
        if classes < 2 or shift < 0:
            raise ValueError(f"a sequence task has at least 2 classes and a shift >= 0, not {classes} and {shift}")
        self.classes, self.ignore_index, self.shift = classes, ignore_index, shift
        # [batches holding padding, of them those scoring some, padding positions scored, positions scored]
        self._sums: torch.Tensor | None = None

    def see(self, inputs, targets: torch.Tensor) -> None:
        """One training batch as the doctor reads it (its targets shifted already, where the model shifts them)."""
        mask = attention_mask(inputs)
        if mask is None or not torch.is_tensor(targets) or targets.shape != mask.shape:
            return
        with torch.no_grad():
            if self.shift:
                mask = shifted(mask, self.shift, fill=1)  # the mask of each target's own position
            mask = mask.to(targets.device, non_blocking=True)
            scored = in_classes(targets, self.classes) & (targets != self.ignore_index)
            dropped = mask == 0
            padding_scored = (scored & dropped).sum()
            counts = torch.stack([dropped.any().long(), (padding_scored > 0).long(), padding_scored, scored.sum()])
            self._sums = counts if self._sums is None else self._sums + counts.to(self._sums.device)

    def measurements(self, recent: Iterable = (), loss_fn: Callable | None = None) -> dict:
        """The sums as shares (NaN: no batch held padding, or no attention mask was seen); one host read.

        Where padding was scored, the labels it carries in the `recent` (inputs, targets) batches are tried on
        `loss_fn` (`ignored_by`): a loss that ignores them itself (a function computing
        `F.cross_entropy(..., ignore_index=pad_id)`, whose ignore_index the doctor cannot read) scores no padding.
        """
        padded, scoring, padding_scored, scored = self._sums.tolist() if self._sums is not None else (0, 0, 0, 0)
        if scoring and loss_fn is not None:
            labels = self.labels_under_padding(recent)
            if labels and all(ignored_by(loss_fn, label, self.classes) for label in labels):
                scoring = padding_scored = 0
        return {
            PADDED: padded,
            SHARE: scoring / padded if padded else math.nan,
            POSITIONS: padding_scored / scored if padded and scored else math.nan,
        }

    def labels_under_padding(self, pairs: Iterable) -> set[int]:
        """The labels the loss would score at positions the attention mask drops, in these (inputs, targets) pairs."""
        found: set[int] = set()
        for inputs, targets in pairs:
            mask = attention_mask(inputs)
            if mask is None or not torch.is_tensor(targets) or targets.shape != mask.shape:
                continue
            mask = shifted(mask, self.shift, fill=1) if self.shift else mask
            scored = in_classes(targets, self.classes) & (targets != self.ignore_index)
            found |= set(targets[scored & (mask.to(targets.device) == 0)].unique().tolist())
        return found


def ignored_by(loss_fn: Callable, label: int, classes: int) -> bool:
    """Whether `loss_fn` leaves out positions labelled `label`: tried on two rows of distinct logits.

    The loss of one row with another label against that row twice, once with `label`: the same only where the
    second is left out (the logits differ per class, so a scored `label` moves the mean).
    """
    other = (label + 1) % classes
    row = torch.linspace(0.0, 1.0, classes).unsqueeze(0)
    try:
        with torch.no_grad():
            alone = float(loss_fn(row, torch.tensor([other])))
            both = float(loss_fn(row.repeat(2, 1), torch.tensor([other, label])))
    except Exception:  # noqa: BLE001 - a loss that cannot take the label does not score it either way; say scored
        return False
    return math.isclose(alone, both, rel_tol=1e-6, abs_tol=1e-9)


def finding(measured: Mapping) -> Finding | None:
    """The padding_in_loss finding where most batches holding padding scored some of it; else None."""
    share = measured.get(SHARE)
    if share is None or not share > PADDED_BATCHES_SCORED:  # NaN too: nothing held padding
        return None
    evidence = (
        f"the loss scored positions that the attention mask drops (padding) in {share:.0%} of the"
        f" {measured[PADDED]:.0f} training batches holding padding (over {PADDED_BATCHES_SCORED:.0%} is the"
        f" fault: a collator that labels padding -100 leaves none); {measured[POSITIONS]:.1%} of the positions it"
        " scored were padding, so the model is trained to predict pad tokens and the loss averages over them"
    )
    return Finding(
        VERDICT, evidence, NEXT_STEP, math.nan, feature=SHARE, value=share, threshold=PADDED_BATCHES_SCORED, above=True
    )
