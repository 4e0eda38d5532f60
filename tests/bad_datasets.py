"""Datasets no classifier can be trained on, as loaders a dataset YAML can name (`_target_: bad_datasets.<name>`).

The tests' folder is on the import path while pytest runs, so these load in-process like any dataset loader.
"""

import numpy as np


def nan_features(n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """Two clean classes, but one feature value is NaN (a missing value nobody imputed)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, 4)), np.arange(n) % 2
    x[17, 2] = np.nan
    return x, y


def one_lonely_example(n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """Three classes, one of which has a single example: a stratified split cannot put it on both sides."""
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    y[5] = 2
    return rng.normal(size=(n, 4)), y


def too_few_for_the_split(classes: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Twelve classes of three examples: a quarter held out is 9 examples, fewer than the classes."""
    rng = np.random.default_rng(0)
    return rng.normal(size=(3 * classes, 4)), np.repeat(np.arange(classes), 3)


def not_a_pair() -> np.ndarray:
    """A loader that returns only the features."""
    return np.zeros((10, 2))


def ragged() -> tuple[np.ndarray, np.ndarray]:
    """Features with one row more than there are labels."""
    return np.zeros((11, 2)), np.arange(10) % 2
