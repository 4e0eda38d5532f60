"""The run's random streams, left as the doctor found them: `streams_kept`, and validation read through `OwnReading`.

A seeded program draws the same random numbers with the doctor as without it (tests/test_doctor_leaves_the_run.py):
the doctor's own passes (its evaluations, the fits of fresh models, the first imports at the report) run with
every stream put back after them.
"""

import contextlib
import random
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from doctor.refusals import UnsupportedTask


@contextlib.contextmanager
def streams_kept(device: torch.device | None = None) -> Iterator[None]:
    """Run the block, then put back every random stream a program may draw from as the block found it.

    Torch's CPU generator (and the device's, on CUDA), numpy's global generator and Python's `random`. The doctor's
    own passes draw from them, or import what does: scikit-learn's first import (the quick references, at the
    report) imports `rich`, which draws from Python's `random` as it loads, so a seeded program's draws after
    report() differed with the doctor and without it.
    """
    python, legacy = random.getstate(), np.random.get_state()
    devices = [device] if device is not None and device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(legacy)


class OwnReading:
    """The user's validation batches, as the doctor reads them: without drawing on the run's random stream.

    Each iteration of a DataLoader draws a seed from torch's default CPU generator (`iter()`, shuffled or not), so
    every evaluation of the doctor's (before the first step, at the end, the references' examples) moved the
    training that followed: a seeded loop with a validation DataLoader gave other losses with the doctor than
    without it. Every random stream is put back when an iteration ends, however it ends (`streams_kept`; a `break`
    closes the generator). The doctor's evaluations run in eval mode, where a model draws nothing on its device. A
    one-pass iterator is refused (the doctor reads validation twice), and a pass that yields no batch is kept as
    `read_none`, for the report to say.
    """

    def __init__(self, batches: Iterable):
        if isinstance(batches, Iterator):  # a generator: the doctor's second pass would find it spent
            raise UnsupportedTask(
                f"validation is a one-pass iterator ({type(batches).__name__}): the doctor reads it before the first"
                " step and again at the report; pass a list of batches or a DataLoader"
            )
        self.batches = batches
        self.read_none = False  # the last pass yielded no batch (an empty loader: judged as without validation)

    def __iter__(self) -> Iterator:
        read = 0
        with streams_kept():
            for batch in self.batches:
                read += 1
                yield batch
        self.read_none = read == 0
