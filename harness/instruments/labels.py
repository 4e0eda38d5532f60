"""Labels: the class mix of the targets the loop trains on, overall and batch by batch.

Overall: how imbalanced the classes are (label_imbalance) and the score of always answering the majority
(majority_share: the accuracy a model that learned nothing gets). Batch by batch: whether each batch mixes the
classes as a shuffled batch would (batch_label_mix), which data sorted by class and fed in order does not.
The targets are counted as the task reads them (class indices, one-hot rows, multi-label rows, a sequence's
positions), so the counting waits for the task the first training forward shows (harness/instruments/outputs.py).
A sequence's class mix is that of its positions (those the loss ignores left out); its batch mix is not measured,
as a batch's positions are no independent draws of a label that random batches could be compared with.
"""

import math
from statistics import median

import numpy as np
import torch

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import entropy
from harness.targets import INDEX_TASKS, class_labels, in_classes

BATCH_DRAWS = 256  # random batches the label mix is compared with
# The labels are counted in bulk at a census step once this many batches or values are pending (a count reads its
# result back to the host, which waits for the device: between census steps the instruments read nothing), or
# anywhere once HOLD_AT_MOST times as many are, so that what waits is bounded whatever the census schedule.
FLUSH_BATCHES, FLUSH_VALUES = 1024, 1 << 18
HOLD_AT_MOST = 16


def _left_in(labels: torch.Tensor, sizes: list[int], valid: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """The labels that name a class, and how many each batch keeps (batches left with none are dropped).

    `labels` are the batches' labels laid end to end, `sizes` each batch's count: labels the loss ignores (-1,
    -100, 255: outside the output's classes) are no class to count, in the class mix or in a batch's entropy.
    """
    if sum(sizes) != len(labels):  # targets of several labels per example: no batch boundaries to keep
        return labels[valid], sizes
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(valid.device)
    kept = torch.bincount(batch[valid], minlength=len(sizes)).tolist()
    return labels[valid], [n for n in kept if n]


class Labels(Collector):
    """Running class counts (positives per label for multi-label targets) and each batch's label entropy."""

    COLUMNS = (
        Column(
            "label_imbalance",
            F64,
            "most frequent class over least frequent among the training labels seen",
            per_budget=True,
        ),
        Column(
            "batch_label_mix",
            F64,
            "mean entropy of each batch's labels over that of random batches of the same size from the labels seen",
            per_budget=True,
        ),
        Column(
            "majority_share",
            F64,
            "share of the most frequent class among the training labels seen (the class prior)",
            per_budget=True,
        ),
    )

    def __init__(self, loop: Loop):
        self.loop = loop
        self.label_counts: torch.Tensor | None = None
        self.label_positives: torch.Tensor | None = None  # multi-label: how often each label is 1
        self.label_rows = 0
        self._pending_labels: list[torch.Tensor] = []  # counted in bulk: a bincount per step costs more than it says
        self._pending_values = 0
        self.batch_entropies: list[float] = []  # per batch with class labels: the entropy of its labels (nats)
        self.batch_sizes: list[int] = []

    def see(self, inputs, targets) -> None:
        """Count the batch's targets (per label for multi-label targets), in bulk."""
        if not (torch.is_tensor(targets) and targets.dim() >= 1) or not targets.shape[0]:  # shape: len() costs more
            return
        self._pending_labels.append(targets.detach() if targets.requires_grad else targets)
        self._pending_values += targets.numel()
        # Counted in bulk, as seldom as memory allows: a flush costs about half a step whatever its size.
        over = max(len(self._pending_labels) / FLUSH_BATCHES, self._pending_values / FLUSH_VALUES)
        if over >= 1 and (self.loop.census_next or over >= HOLD_AT_MOST) and self.loop.task is not None:
            self._flush()

    def _flush(self) -> None:
        task = self.loop.task
        if not self._pending_labels or task is None:
            return
        pending, self._pending_labels, self._pending_values = self._pending_labels, [], 0
        if task == "multilabel":
            rows = torch.cat([t.reshape(len(t), -1).float() for t in pending])
            positives = rows.sum(dim=0)
            self.label_positives = positives if self.label_positives is None else self.label_positives + positives
            self.label_rows += len(rows)
            return
        try:
            labels = class_labels(torch.cat(pending), task)
        except (RuntimeError, ValueError):
            return
        if labels is None or not len(labels):
            return
        sizes = [len(t) for t in pending]
        valid = in_classes(labels, self.loop.classes if task in INDEX_TASKS else None)
        if not bool(valid.all()):
            labels, sizes = _left_in(labels, sizes, valid)
        if labels.numel() and sum(sizes) == len(labels):
            self._batch_entropies(labels, sizes)
        if not labels.numel():
            return
        counts = torch.bincount(labels, minlength=0 if self.label_counts is None else len(self.label_counts))
        if self.label_counts is not None and len(counts) > len(self.label_counts):
            self.label_counts = torch.nn.functional.pad(self.label_counts, (0, len(counts) - len(self.label_counts)))
        self.label_counts = counts if self.label_counts is None else self.label_counts + counts

    def _batch_entropies(self, labels: torch.Tensor, sizes: list[int]) -> None:
        """The entropy of each batch's labels, for batches laid end to end in `labels` (one bincount for all)."""
        labels = labels.cpu()
        classes = int(labels.max()) + 1
        batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        counts = torch.bincount(batch * classes + labels, minlength=len(sizes) * classes).reshape(len(sizes), classes)
        self.batch_entropies.extend(entropy(counts.double()).tolist())
        self.batch_sizes.extend(sizes)

    def _batch_label_mix(self) -> float:
        """Mean entropy of the batches' labels over that of batches drawn at random from the labels seen.

        1 for shuffled batches, whatever the class mix (an imbalanced set has a lower entropy in both); near 0 when
        each batch holds one class, as data sorted by class and fed in order gives. NaN where a shuffled batch
        has no entropy to compare with (one class, batches of one example).
        """
        if not self.batch_entropies or self.label_counts is None or self.label_counts.sum() == 0:
            return math.nan
        size = int(median(self.batch_sizes))
        prior = self.label_counts.double() / self.label_counts.sum()
        generator = torch.Generator().manual_seed(0)  # the same yardstick for the same labels, run after run
        draws = torch.multinomial(prior, size * BATCH_DRAWS, replacement=True, generator=generator)
        draws = draws.reshape(BATCH_DRAWS, size) + len(prior) * torch.arange(BATCH_DRAWS).unsqueeze(1)
        counts = torch.bincount(draws.flatten(), minlength=BATCH_DRAWS * len(prior)).reshape(BATCH_DRAWS, len(prior))
        shuffled = float(entropy(counts.double()).mean())
        return float(np.mean(self.batch_entropies)) / shuffled if shuffled > 1e-9 else math.nan

    def columns(self, final: bool) -> dict:
        self._flush()
        counts = self.label_counts.double() if self.label_counts is not None else None
        majority = float(counts.max() / counts.sum()) if counts is not None else math.nan
        if self.loop.task == "multilabel" and self.label_rows:
            share = self.label_positives.double() / self.label_rows  # each label's prior: answer its majority value
            majority = float(torch.maximum(share, 1 - share).mean())
        elif self.loop.task == "regression":
            majority = 0.0  # the R² of always predicting the mean
        return {
            "label_imbalance": float(counts.max() / counts.min().clamp(min=1)) if counts is not None else math.nan,
            "batch_label_mix": self._batch_label_mix(),
            "majority_share": majority,
        }
