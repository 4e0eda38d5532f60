"""Data for one cell: load any (X, y) source, split, standardize, plant data faults, stream batches.

The dataset config names an importable callable (`loader._target_`) that returns `(X, y)` arrays, so a new
dataset is one YAML file. The data-side fault knobs (`input_scale`, `shuffle_labels`, `batch_latency_s`) are
applied here, after the healthy pipeline, so a fault changes exactly one thing.
"""

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from hydra.utils import instantiate
from sklearn.model_selection import train_test_split


@dataclass
class Splits:
    """Training and validation tensors, ready for the model."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int


def load_splits(dataset_cfg, data_cfg, seed: int) -> Splits:
    """Load `(X, y)` from the dataset's callable and apply the recipe's data pipeline."""
    loaded = instantiate(dataset_cfg.loader)
    if not (isinstance(loaded, tuple | list) and len(loaded) == 2):
        raise TypeError(f"dataset {dataset_cfg.name}: loader must return (X, y), got {type(loaded).__name__}")
    features = np.asarray(loaded[0], dtype=np.float32)
    _, labels = np.unique(np.asarray(loaded[1]), return_inverse=True)  # any label values -> 0..C-1
    if features.ndim != 2 or len(features) != len(labels):
        raise ValueError(f"dataset {dataset_cfg.name}: X must be 2-D with one row per label, got {features.shape}")
    n_classes = int(labels.max()) + 1

    train, val = train_test_split(
        np.arange(len(labels)), test_size=data_cfg.val_fraction, random_state=seed, stratify=labels
    )
    if data_cfg.standardize:
        mean = features[train].mean(axis=0)
        std = features[train].std(axis=0)
        std[std == 0] = 1.0  # digits has pixels that are always 0: leave them at 0 instead of dividing by 0
        features = (features - mean) / std
    features = features * data_cfg.input_scale

    y_train = labels[train]
    if data_cfg.shuffle_labels:
        # Training labels only: validation keeps the truth, so accuracy shows nothing was learned.
        y_train = np.random.default_rng(seed).permutation(y_train)
    return Splits(
        x_train=torch.from_numpy(np.ascontiguousarray(features[train])),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_val=torch.from_numpy(np.ascontiguousarray(features[val])),
        y_val=torch.from_numpy(labels[val].astype(np.int64)),
        n_classes=n_classes,
    )


def training_batches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int, latency_s: float = 0.0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless shuffled minibatches, reshuffled each epoch; the last partial batch of an epoch is dropped.

    latency_s > 0 makes this a slow loader: the iterator stalls before each batch the way a loader does
    that reads from a slow disk or decodes on one process, so the training step waits for data. Over many
    batches the stall averages latency_s per batch, however coarse the OS's sleep is.
    """
    if batch_size > len(x):
        raise ValueError(f"batch_size {batch_size} exceeds the {len(x)} training examples")
    generator = torch.Generator().manual_seed(seed)
    owed = 0.0  # stall still owed: the OS oversleeps short sleeps, so the excess is taken off the next one
    while True:
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x) - batch_size + 1, batch_size):
            if latency_s > 0:
                owed += latency_s
                began = time.perf_counter()
                time.sleep(max(owed, 0.0))
                owed -= time.perf_counter() - began
            index = order[start : start + batch_size]
            yield x[index], y[index]
