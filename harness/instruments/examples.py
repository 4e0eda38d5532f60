"""Kept examples: the first training examples the loop was fed, for the reference fit (harness/reference.py).

No column of its own: quick references (a ridge classifier, nearest neighbours) trained on these examples are the
run's own yardsticks, what simple models reach on the same features and labels. The examples are kept on the CPU,
inputs flattened to rows; the targets become class indices once the task is known. The example axis is decided once
per run: the inputs' first dimension, as long as every batch has as many input rows as targets; the first batch that
has not (a sequence-first loop, `(time, batch, features)`, whose batch of one a one-letter string happens to match)
shows the examples are not rows of the inputs, and nothing is kept from then on, nor from before. Those of a batch
on an accelerator stay on its device until the next census step (a copy to the CPU waits for the device: the
instruments read nothing back between census steps).
"""

import numpy as np
import torch

from harness.batches import rows
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import example_rows
from harness.targets import class_labels, in_classes


class KeptExamples(Collector):
    """The first `limit` examples of the loop's batches (floating-point inputs and their targets), on the CPU."""

    def __init__(self, loop: Loop, limit: int):
        self.loop, self.limit = loop, limit
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # on the CPU from the next census step on
        self.n_kept = 0
        self._on_device = 0  # the last kept entries not yet copied to the CPU
        # Why the examples are not rows of the inputs, once a batch showed it ("" while every batch had one row per
        # target): decided once for the run, never batch by batch.
        self.not_rows = ""

    def see(self, inputs, targets) -> None:
        # Read on the first batches only, while examples are still being kept: the decision is the run's.
        keeping = self.n_kept < self.limit and not self.not_rows
        if keeping and torch.is_tensor(targets) and targets.dim() >= 1 and rows(inputs) != len(targets):
            self.not_rows = (
                f"a batch's inputs had {rows(inputs)} rows for {len(targets)} targets: the examples are not the"
                " inputs' first dimension (sequence first?)"
            )
            self.kept, self.n_kept, self._on_device, keeping = [], 0, 0, False
        if keeping:
            kept = example_rows(inputs, targets, self.limit - self.n_kept, to_host=False)
            if kept is not None:
                self.kept.append(kept)
                self.n_kept += len(kept[1])
                self._on_device += 1
        if self._on_device and self.loop.census_next:  # the step about to run is a census step: reads are due
            self._to_host()

    def _to_host(self) -> None:
        fresh = len(self.kept) - self._on_device
        self.kept[fresh:] = [(x.cpu(), y.cpu()) for x, y in self.kept[fresh:]]
        self._on_device = 0

    def examples(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The distinct training examples among the first the loop was fed, inputs flattened to rows, in order.

        A small training set comes round again every epoch: each example counts once. Targets are class indices;
        None if none was kept or the task has no class per example (multi-label, regression, sequence: no
        reference fit).
        """
        if not self.kept or self.loop.task == "sequence":  # a label per position: no example's label to fit
            return None
        self._to_host()
        try:
            x = torch.cat([x for x, _ in self.kept])
            y = class_labels(torch.cat([y for _, y in self.kept]), self.loop.task)
        except (RuntimeError, ValueError):  # targets of different shapes from batch to batch
            return None
        if y is None or len(y) != len(x):
            return None
        valid = in_classes(y, self.loop.classes if self.loop.task == "multiclass" else None)
        if not bool(valid.all()):  # labels the loss ignores (-1, -100, 255) are no class for a reference to learn
            x, y = x[valid], y[valid]
            if not len(y):
                return None
        _, first = np.unique(torch.cat([x, y.unsqueeze(1).float()], dim=1).numpy(), axis=0, return_index=True)
        order = torch.from_numpy(np.sort(first))
        return x[order], y[order]
