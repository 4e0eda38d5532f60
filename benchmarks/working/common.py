"""What the working programs share: the budget cap the tests set, and data that needs no download.

The programs in this folder are re-created from public sources with their own data swapped for data that ships
with Python or scikit-learn. The text corpus is the standard library's own top-level source files (a real
corpus on every Python install), split by file so that validation text comes from files never trained on.
"""

import os
import sysconfig
import zlib
from pathlib import Path

import torch

# The tests run every program on a short budget: at most this many epochs (or steps, for a program that counts
# steps). An environment variable, not a module constant: the runner reloads the modules of this folder for
# every run, so that data drawn at import follows the run's seed.
EPOCH_CAP_VARIABLE = "WORKING_EPOCH_CAP"


def epochs(n: int) -> int:
    """The program's own number of epochs, or the tests' cap (WORKING_EPOCH_CAP) when it is lower."""
    cap = os.environ.get(EPOCH_CAP_VARIABLE)
    return n if not cap else min(n, int(cap))


def stdlib_files() -> list[Path]:
    """The standard library's top-level .py files, sorted by name (the same list on every run)."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def stdlib_bytes(split: str, limit: int) -> torch.Tensor:
    """Up to `limit` bytes of standard-library source as int64 tokens 0..255, from the files of one split.

    A file is in "validation" when the CRC32 of its name is divisible by 10 (about a tenth of the files), else
    in "train": the split is by file and does not move when the library gains a file.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"unknown split {split!r}: choose train or validation")
    chunks, size = [], 0
    for path in stdlib_files():
        if (zlib.crc32(path.name.encode()) % 10 == 0) != (split == "validation"):
            continue
        data = path.read_bytes()[: limit - size]
        chunks.append(data)
        size += len(data)
        if size >= limit:
            break
    return torch.tensor(list(b"".join(chunks)), dtype=torch.int64)
