"""Padding counted in the loss: a sequence loss that scores positions the batch's padding mask drops.

Sequences of varied lengths are padded to a batch's longest; the padded positions are marked by a mask (0: padding)
and their labels must be the loss's ignore_index (-100), or the loss scores the padding: the model is trained to
predict pad tokens (trivial after the first) and the loss it reports is an average over text and padding alike.
Nothing in the loss curve shows it; the batch does. `PaddingWatch` counts, per training batch with a mask beside
(batch, time) targets, whether any position the mask drops has a target the loss scores (a class of the output
other than the loss's ignore_index), and how many such positions there are.

Where the mask comes from is a fact of the data, not of any fault: a Hugging Face batch keeps it under
`attention_mask` (the doctor reads it there, `attention_mask`); the grid's text windows (harness/text.py) have
no mask of their own, and their mask is the one the data pipeline defines, the inputs that are not the dataset's
pad id (as a tokenizer's pad_token_id marks padding). With a causal shift (the model scores the output at t
against label t + 1) a target's position is that of its label, so the mask is shifted as the targets are. A loss
that ignores the pad label itself scores no padding: its `ignore_index` is read where it has one, and otherwise
the labels padding carries are tried on it (`ignored_by`) when the report is made.

`Padding` is the collector: the grid's cells give it their dataset's pad id; the doctor hands it the watch it
builds once the first batch shows a sequence task (doctor/watch.py). The sums stay on the batch's device until the
columns are read at the end, so the count adds no host read to a training step. What the counts mean as a finding
is the check `padding_in_loss` (analysis/checks/language.py).
"""

import math
from collections.abc import Callable, Iterable, Mapping

import torch

from harness.column import F64, I64, Column
from harness.instruments.loop import Collector, Loop
from harness.targets import in_classes, shifted

MASK_KEY = "attention_mask"  # where a batch's inputs keep the mask (Hugging Face's name)
# The record's columns (and the doctor's measurements); `Padding.COLUMNS` spells them out, as it is read from the
# source (harness/columns.py).
SHARE = "padding_scored_batch_share"  # of the batches holding padding, the share whose loss scores some of it
POSITIONS = "padding_scored_position_share"  # of the positions the loss scores, the share under a 0 of the mask
PADDED = "padded_batches"  # batches that held padding (a 0 in the mask)
NOT_PADDED = {PADDED: 0, SHARE: math.nan, POSITIONS: math.nan}  # no batch held padding, or no mask was seen


def attention_mask(inputs) -> torch.Tensor | None:
    """The batch's attention mask: its inputs' `attention_mask` where they are a dict holding one, else None."""
    mask = inputs.get(MASK_KEY) if isinstance(inputs, Mapping) else None
    return mask if torch.is_tensor(mask) and mask.dim() == 2 else None


def pad_mask(inputs, pad_id: int) -> torch.Tensor | None:
    """The mask of (batch, time) token ids padded with `pad_id`: 1 where a token is, 0 at padding; else None."""
    if not torch.is_tensor(inputs) or inputs.dim() != 2 or inputs.is_floating_point():
        return None
    return inputs != pad_id


class PaddingWatch:
    """Per training batch with a padding mask and (batch, time) targets: whether a dropped position is scored.

    `classes`: the output's classes (a target outside them is one the loss ignores; None: any index >= 0 is a
    class, where the output's width is not known when batches are counted); `ignore_index`: the loss's own, also
    ignored where it lies inside them; `shift`: the causal shift the targets are read with (0: none); `pad_id`:
    the token id the data pads with, whose positions are the mask's 0 (None: the batch's `attention_mask`).
    """

    def __init__(self, classes: int | None, ignore_index: int, shift: int = 0, pad_id: int | None = None):
        if (classes is not None and classes < 2) or shift < 0:
            raise ValueError(f"a sequence task has at least 2 classes and a shift >= 0, not {classes} and {shift}")
        self.classes, self.ignore_index, self.shift, self.pad_id = classes, ignore_index, shift, pad_id
        # [batches holding padding, of them those scoring some, padding positions scored, positions scored]
        self._sums: torch.Tensor | None = None

    def mask(self, inputs) -> torch.Tensor | None:
        """The batch's padding mask (0 at padding), where it has one: by its pad id, or its attention mask."""
        return attention_mask(inputs) if self.pad_id is None else pad_mask(inputs, self.pad_id)

    def _scored_under_padding(self, inputs, targets) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per position: whether the loss scores its target, and whether the mask drops it (None: no mask)."""
        mask = self.mask(inputs)
        if mask is None or not torch.is_tensor(targets) or targets.shape != mask.shape:
            return None
        if self.shift:
            mask = shifted(mask, self.shift, fill=1)  # the mask of each target's own position
        scored = in_classes(targets, self.classes) & (targets != self.ignore_index)
        return scored, mask.to(targets.device, non_blocking=True) == 0

    def see(self, inputs, targets: torch.Tensor) -> None:
        """One training batch as the loop trains on it (its targets shifted already, where the model shifts them)."""
        with torch.no_grad():
            read = self._scored_under_padding(inputs, targets)
            if read is None:
                return
            scored, dropped = read
            padding_scored = (scored & dropped).sum()
            counts = torch.stack([dropped.any().long(), (padding_scored > 0).long(), padding_scored, scored.sum()])
            self._sums = counts if self._sums is None else self._sums + counts.to(self._sums.device)

    def measurements(self, recent: Iterable = (), loss_fn: Callable | None = None) -> dict:
        """The sums as shares (NaN: no batch held padding, or no mask was seen); one host read.

        Where padding was scored, the labels it carries in the `recent` (inputs, targets) batches are tried on
        `loss_fn` (`ignored_by`): a loss that ignores them itself (a function computing
        `F.cross_entropy(..., ignore_index=pad_id)`, whose ignore_index cannot be read) scores no padding.
        """
        padded, scoring, padding_scored, scored = self._sums.tolist() if self._sums is not None else (0, 0, 0, 0)
        if scoring and loss_fn is not None and self.classes is not None:
            labels = self.labels_under_padding(recent)
            if labels and all(ignored_by(loss_fn, label, self.classes) for label in labels):
                scoring = padding_scored = 0
        return {
            PADDED: padded,
            SHARE: scoring / padded if padded else math.nan,
            POSITIONS: padding_scored / scored if padded and scored else math.nan,
        }

    def labels_under_padding(self, pairs: Iterable) -> set[int]:
        """The labels the loss would score at positions the mask drops, in these (inputs, targets) pairs."""
        found: set[int] = set()
        for inputs, targets in pairs:
            read = self._scored_under_padding(inputs, targets)
            if read is not None:
                scored, dropped = read
                found |= set(targets[scored & dropped].unique().tolist())
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


class Padding(Collector):
    """The padding the loss scores, counted on every training batch by a `PaddingWatch` (None: nothing counted).

    `pad_id`: the dataset's pad token id (the grid's text windows: harness.text.PAD), for a watch of (batch, time)
    token ids against the loop's loss's ignore_index; None leaves the watch to whoever knows the task (the doctor
    sets `watch` at the first batch, reading the mask from the batch's `attention_mask`).
    """

    COLUMNS = (
        Column(
            "padded_batches", I64, "training batches that held padding (a 0 in the padding mask; 0 on runs without one)"
        ),
        Column(
            "padding_scored_batch_share",
            F64,
            "of the training batches holding padding, the share whose loss scored some of it (a target the loss does"
            " not ignore under a 0 of the mask; NaN: no padding)",
        ),
        Column(
            "padding_scored_position_share",
            F64,
            "of the positions the training loss scored in the batches with a padding mask, the share under a 0 of"
            " the mask (NaN: no padding)",
        ),
    )

    def __init__(self, loop: Loop, pad_id: int | None = None):
        self.loop = loop
        self.watch: PaddingWatch | None = None
        if pad_id is not None:
            ignore_index = getattr(loop.loss_fn, "ignore_index", None)
            # nn.CrossEntropyLoss's and F.cross_entropy's default: what every collator pads labels with
            self.watch = PaddingWatch(None, ignore_index if isinstance(ignore_index, int) else -100, pad_id=pad_id)

    def see(self, inputs, targets) -> None:
        if self.watch is not None:
            self.watch.see(inputs, targets)

    def columns(self, final: bool) -> dict:
        if not final:
            return {}
        return self.watch.measurements() if self.watch is not None else dict(NOT_PADDED)
