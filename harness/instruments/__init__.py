"""Instruments: the checks, taken on any training loop through hooks and timers.

They see only what every PyTorch loop has: the model, the optimizer, the batch iterator and the loss
function. They never see which fault (if any) was planted. A loop is observed with three additions:

    instruments = Instruments(model, optimizer, loss_fn)
    for x, y in instruments.watch(batches):        # times the wait for each batch
        ...
        loss.backward()
        instruments.after_backward(loss)           # loss curve; gradient census on census steps
        optimizer.step()                            # step hooks measure update-to-weight ratios
    measurements = instruments.finish()

With mixed precision, `Instruments(..., scaler=scaler)` is given the loop's `torch.amp.GradScaler`: the census
reads gradients divided by its scale (what they are once unscaled), and the scale itself is a measurement.
The optimizer's step hooks also read the loop's other standard pieces without being told of them: gradient
clipping (the gradient's norm at the step against its norm after backward), and a learning-rate schedule (the
rate in the optimizer's param group at each step, against the rate it was built with).

`snapshot()` gives the scalar measurements at any point of the loop (the grid takes one at each step budget,
as if the run had stopped there). `kept_examples()` returns the first training examples the loop was fed,
for the reference fit (harness/reference.py).

`memorize` and `fit_capacity` are the checks that need a fresh model: they train new models from the run's own
model factory, at fixed sensible rates, on a handful of the run's examples (can it learn at all?) and on up to
`CAPACITY_EXAMPLES` of them (can it fit this much data?).

The modules, each with one job:

- observer.py: `Instruments`, the object the loop talks to: it composes the collectors and merges their columns.
- loop.py: `Loop`, what the collectors share of the observed loop, and `Collector`, what each one is.
- One collector per measurement, each with its own hooks and its own columns (declared in its `COLUMNS`,
  which the record's table is assembled from: harness/columns.py): losses.py (loss curve, spikes,
  validation), data_wait.py, probe.py (the probe batch, input RMS), activations.py (dead and saturated units),
  outputs.py (task, loss, probability rows, confident disagreement, output reach), causality.py (whether a
  next-token model's outputs move with later tokens), modes.py (train/eval mode),
  labels.py (class mix), examples.py (kept for the reference fit), census.py (gradients), update_ratios.py,
  clearing.py (was .grad cleared), optimizer_steps.py, clipping.py, learning_rate.py, amp.py (GradScaler).
- signals.py: the pure functions (spikes, the activation census, ...); memorization.py: `memorize`, `fit_capacity`.
- ranks.py: `RankWatch`, what one rank of a distributed run measures of its own (batch fingerprints, replica
  checksums, its own and the stepped gradient's norms), with no collective; the doctor compares the ranks.
"""

from harness.instruments.memorization import CAPACITY_EXAMPLES, fit_capacity, memorize
from harness.instruments.observer import Instruments, NoInstruments
from harness.instruments.signals import (
    activation_census,
    dead_units,
    example_rows,
    last_module,
    periodicity,
    plain_forward,
    spikes,
)

__all__ = [
    "CAPACITY_EXAMPLES",
    "Instruments",
    "NoInstruments",
    "activation_census",
    "dead_units",
    "example_rows",
    "fit_capacity",
    "last_module",
    "memorize",
    "periodicity",
    "plain_forward",
    "spikes",
]
