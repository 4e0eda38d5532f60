"""A generated sequence-classification problem for the sequence family: count the ones in a binary sequence.

Each example is a sequence of `length` steps, each 0 or 1, stored as one row of X (one column per step, the
layout every dataset of the harness has); its label is the number of ones in it. Counting needs the whole
sequence, and the classes are balanced, so a model that ignores its input stays at chance (1 / n_classes)
while a recurrent model that keeps a running count can be exact.
"""

import numpy as np


def make_counting(
    n_samples: int = 2400, length: int = 18, min_count: int = 4, n_classes: int = 10, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Binary sequences labelled with their number of ones; returns `(X, y)`.

    X: float32 of shape (n_samples, length), one sequence per row, every entry 0.0 or 1.0.
    y: int64 of shape (n_samples,), the number of ones in the row: one of min_count .. min_count + n_classes - 1,
        each count n_samples // n_classes or one more times (the classes are as balanced as n_samples allows).
    The ones sit at uniformly random positions. The same arguments always give the same arrays.
    """
    if n_classes < 2:
        raise ValueError(f"n_classes must be at least 2, got {n_classes}")
    if min_count < 0 or min_count + n_classes - 1 > length:
        raise ValueError(f"counts {min_count}..{min_count + n_classes - 1} do not fit in sequences of length {length}")
    rng = np.random.default_rng(random_state)
    # Every class the same number of times (up to the remainder), in random order.
    y = min_count + rng.permutation(np.arange(n_samples) % n_classes)
    # A random ranking of the positions in each row; the positions ranked below the row's count are the ones.
    ranks = rng.random((n_samples, length)).argsort(axis=1).argsort(axis=1)
    X = (ranks < y[:, None]).astype(np.float32)
    return X, y.astype(np.int64)
