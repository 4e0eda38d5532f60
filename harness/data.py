"""Data for one cell: load any (X, y) source, split, standardize, plant data faults, stream batches.

The dataset config names an importable callable (`loader._target_`) that returns `(X, y)` arrays, so a new
dataset is one YAML file. The data-side fault knobs (input scale, label shuffling, noise and shift, a small or
imbalanced training set, a periodic bad batch, a slow loader) are applied here, after the healthy pipeline, so
a fault changes exactly one thing. Validation data is never touched: it always tells the truth.

Batches come either from whole-batch tensor indexing (`indexed`: no per-example cost, the harness's own
iterator) or from a torch `DataLoader` over a `TensorDataset` (`dataloader`: per-example indexing and
collation, as most loops are fed), so that the data-wait checks are fitted on what real loops cost.
"""

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

from harness.checks import BATCH_KINDS, BATCH_ORDERS, dataset_problem, load_dataset
from harness.text import IGNORE, VOCAB, TextCorpus, stdlib_corpus, windows


@dataclass
class Splits:
    """Training and validation tensors, ready for the model."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int
    text: TextCorpus | None = None  # the corpus the windows were cut from, for a text dataset (harness/text.py)


# The data knobs of class-per-example datasets, at their healthy values: a text dataset takes none of them.
CLASS_DATA_KNOBS = {
    "input_scale": 1.0,
    "shuffle_labels": False,
    "label_shift": 0,
    "label_noise": 0.0,
    "train_share": 1.0,
    "minority_share": 1.0,
    "targets": "index",
    "bad_batch_every": 0,
    "leak_column": False,
    "val_copies": 0.0,
}


def load_splits(dataset_cfg, data_cfg, seed: int) -> Splits:
    """Load `(X, y)` from the dataset's callable and apply the recipe's data pipeline (a text dataset: its windows)."""
    if "text" in dataset_cfg:
        return text_splits(dataset_cfg, data_cfg, seed)
    features, raw_labels = load_dataset(dataset_cfg)
    # The sweep checked this before any cell ran; checked again here for a cell run any other way.
    problem = dataset_problem(dataset_cfg.name, features, raw_labels, data_cfg.val_fraction)
    if problem:
        raise ValueError(problem)
    _, labels = np.unique(raw_labels, return_inverse=True)  # any label values -> 0..C-1
    n_classes = int(labels.max()) + 1

    train, val = train_test_split(
        np.arange(len(labels)), test_size=data_cfg.val_fraction, random_state=seed, stratify=labels
    )
    features = _features(features, labels, train, data_cfg)
    rng = np.random.default_rng(seed)  # one stream, drawn in this order: the kept rows, the labels, the copies
    train = _training_rows(train, labels, n_classes, data_cfg, rng)
    y_train = _training_labels(labels[train], n_classes, data_cfg, rng)
    x_val, y_val = features[val], labels[val]
    if data_cfg.val_copies > 0:
        # The first share of the validation examples replaced by copies of training examples, with their labels (a
        # split made after oversampling or augmenting, an evaluation set that overlaps the training set).
        copies = round(data_cfg.val_copies * len(val))
        drawn = rng.choice(len(train), copies, replace=False)
        x_val, y_val = x_val.copy(), y_val.copy()
        x_val[:copies], y_val[:copies] = features[train][drawn], labels[train][drawn]
    return Splits(
        x_train=torch.from_numpy(np.ascontiguousarray(features[train])),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_val=torch.from_numpy(np.ascontiguousarray(x_val)),
        y_val=torch.from_numpy(y_val.astype(np.int64)),
        n_classes=n_classes,
    )


def _features(features: np.ndarray, labels: np.ndarray, train: np.ndarray, data_cfg) -> np.ndarray:
    """The features as the recipe feeds them: standardized on the training split, a leaked column, a scale."""
    if data_cfg.standardize:
        mean = features[train].mean(axis=0)
        std = features[train].std(axis=0)
        std[std == 0] = 1.0  # digits has pixels that are always 0: leave them at 0 instead of dividing by 0
        features = (features - mean) / std
    if data_cfg.leak_column:
        # A column computed from the label (a feature derived from the target, an id that sorts with it), in both
        # splits, standardized with the training split's statistics like the rest.
        leaked = labels.astype(np.float32)
        scale = leaked[train].std() or 1.0
        features = np.hstack([features, ((leaked - leaked[train].mean()) / scale)[:, None]]).astype(np.float32)
    return features * data_cfg.input_scale


def _training_rows(train: np.ndarray, labels: np.ndarray, n_classes: int, data_cfg, rng) -> np.ndarray:
    """The training rows kept: fewer of the upper classes (an imbalance), or a share of all (too few examples)."""
    if data_cfg.minority_share < 1.0:
        # The upper half of the classes keeps only this share of its training examples (at least one each).
        minority = labels[train] >= (n_classes + 1) // 2
        keep = ~minority | (rng.random(len(train)) < data_cfg.minority_share)
        for c in range((n_classes + 1) // 2, n_classes):
            keep[np.flatnonzero(labels[train] == c)[:1]] = True
        train = train[keep]
    if data_cfg.train_share < 1.0:
        # A random subset with the class mix kept (the split is already shuffled), at least 2 examples per class.
        per_class = [train[labels[train] == k] for k in range(n_classes)]
        train = rng.permutation(
            np.concatenate([c[: max(math.ceil(data_cfg.train_share * len(c)), 2)] for c in per_class])
        )
    return train


def _training_labels(y_train: np.ndarray, n_classes: int, data_cfg, rng) -> np.ndarray:
    """The training labels as the loop gets them: shuffled, shifted a row, or partly drawn again (label faults)."""
    if data_cfg.shuffle_labels:
        # Training labels only: validation keeps the truth, so accuracy shows nothing was learned.
        y_train = rng.permutation(y_train)
    if data_cfg.label_shift:
        # Labels one row off their inputs: the off-by-one of a join or of two lists sliced differently.
        y_train = np.roll(y_train, data_cfg.label_shift)
    if data_cfg.label_noise > 0:
        # Symmetric noise: a share of the labels drawn again uniformly from all classes (so some land on the right
        # one: (C-1)/C of them change), the rest left true. Even at 0.6 the true class stays the most frequent.
        noisy = rng.random(len(y_train)) < data_cfg.label_noise
        y_train = y_train.copy()
        y_train[noisy] = rng.integers(0, n_classes, size=int(noisy.sum()))
    return y_train


def text_splits(dataset_cfg, data_cfg, seed: int) -> Splits:
    """The windows of a text dataset (`dataset.text`, harness/text.py): token ids in, the targets per position.

    The split is the dataset's own, by file; `seed` draws which windows are padded. The class-per-example data
    knobs are refused with one line naming them (`data.standardize` does not apply to token ids and is ignored).
    """
    text = dataset_cfg.text
    changed = [f"data.{key}={data_cfg[key]!r}" for key, healthy in CLASS_DATA_KNOBS.items() if data_cfg[key] != healthy]
    if data_cfg.order == "class_sorted":
        changed.append("data.order='class_sorted'")
    if changed:
        raise ValueError(
            f"dataset {dataset_cfg.name} is a text of next-token targets: {', '.join(changed)} applies only to "
            "datasets with one class per example (digits, synthetic, sequence, zoo/*)"
        )
    corpus = stdlib_corpus(list(text.train_files), list(text.val_files))
    cut = {"context": text.context, "shift": text.shift, "pad_share": text.pad_share}
    x_train, y_train = windows(corpus.train, **cut, pad_target=text.pad_target, seed=seed)
    x_val, y_val = windows(corpus.val, **cut, pad_target=IGNORE, seed=seed + 1)  # validation tells the truth
    return Splits(
        x_train=torch.from_numpy(x_train),
        y_train=torch.from_numpy(y_train),
        x_val=torch.from_numpy(x_val),
        y_val=torch.from_numpy(y_val),
        n_classes=VOCAB,
        text=corpus,
    )


def training_batches(
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    seed: int,
    stall: Callable[[], float] | None = None,
    bad_batch_every: int = 0,
    n_classes: int = 0,
    kind: str = "indexed",
    order: str = "shuffled",
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless shuffled minibatches, reshuffled each epoch; the last partial batch of an epoch is dropped.

    kind: "indexed" takes each batch with one tensor index; "dataloader" serves the same batches through a
    torch DataLoader over a TensorDataset (per-example indexing and collation, on the main process).
    stall, if given, is asked before each batch how many seconds to stall: a slow loader that reads from a slow
    disk or decodes on one process, so the training step waits for data. Over many batches the stall averages
    what it asks for, however coarse the OS's sleep is.
    bad_batch_every = k > 0 makes every k-th batch a mislabeled one (random labels out of n_classes), like a
    corrupt shard met once per pass.
    order: "shuffled" (a new random order each epoch), "fixed" (one random order, the same every epoch: a
    DataLoader with shuffle=False over data shuffled once) or "class_sorted" (sorted by label, fed in order
    every epoch: shuffle=False over data stored class by class).
    """
    if batch_size > len(x):
        raise ValueError(f"batch_size {batch_size} exceeds the {len(x)} training examples")
    if kind not in BATCH_KINDS:
        raise ValueError(f"unknown data.batches {kind!r}: choose {', '.join(BATCH_KINDS)}")
    if order not in BATCH_ORDERS:
        raise ValueError(f"unknown data.order {order!r}: choose {', '.join(BATCH_ORDERS)}")
    generator = torch.Generator().manual_seed(seed)
    fixed = torch.randperm(len(x), generator=generator) if order == "fixed" else None
    if order == "class_sorted":
        fixed = torch.argsort(y, stable=True)
    owed = 0.0  # stall still owed: the OS oversleeps short sleeps, so the excess is taken off the next one
    served = 0
    while True:
        indices = torch.randperm(len(x), generator=generator) if fixed is None else fixed
        if kind == "dataloader":
            loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, sampler=indices.tolist(), drop_last=True)
            epoch = iter(loader)
        else:
            epoch = (indices[s : s + batch_size] for s in range(0, len(x) - batch_size + 1, batch_size))
        for item in epoch:
            if stall is not None:
                owed += stall()
                began = time.perf_counter()
                time.sleep(max(owed, 0.0))
                owed -= time.perf_counter() - began
            inputs, labels = item if kind == "dataloader" else (x[item], y[item])
            served += 1
            if bad_batch_every and served % bad_batch_every == 0:
                yield inputs, torch.randint(n_classes, (len(labels),), generator=generator)
            else:
                yield inputs, labels


class RelativeStall:
    """A loader stall of `multiple` times the training step's own compute time (the slow-loader fault knob).

    The loop reports each step's compute time (`record`); the stall asked for before the next batch is the
    multiple of their running mean, and nothing before the first steps are timed. Defined relative to the step,
    the fault starves a fast model and a slow one alike.
    """

    def __init__(self, multiple: float, warmup: int = 3):
        self.multiple, self.warmup = multiple, warmup
        self.seconds, self.steps = 0.0, 0

    def record(self, compute_s: float) -> None:
        self.steps += 1
        if self.steps > self.warmup:  # the first steps pay one-off costs
            self.seconds += compute_s

    def __call__(self) -> float:
        timed = self.steps - self.warmup
        return self.multiple * self.seconds / timed if timed > 0 else 0.0
