"""Too good to be true: labels that can be read off the inputs far more easily than the task allows.

A label leak is invisible to the quick references (harness/reference.py): they read the leak too, so the run and
its yardsticks agree on a validation accuracy the task does not allow. This module looks for the two shapes a leak
takes in the examples themselves, from the same kept training examples and held-out examples the references use:

- one input column that predicts the label by itself (a feature computed from the label, an id that sorts with
  it): each column's own classifier, a one-dimensional nearest centroid (each class's mean of the column, fitted on
  the training examples), is scored on the held-out examples; the best one (`leak_column_acc`, its index
  `leak_column`) is held against the references fitted on every other column (`leak_rest_acc`). On honest data one
  column predicts far worse than all the others together; `leak_column_z` is how far it predicts better, in
  standard errors of a paired comparison on the same examples (McNemar's: the examples the column gets right and
  the rest wrong, less those the rest gets right and the column wrong, over the square root of their sum). It is
  read only where the column is almost perfect by itself (NEAR_PERFECT): a column that predicts well but not
  perfectly, better than the noisy rest, is a task whose signal sits in one feature, not a leak.
- validation examples that are exact copies of training examples (a split after oversampling or augmenting, an
  evaluation set that overlaps the training set): `val_copy_share`, the share of the held-out examples whose
  inputs are a kept training example's, bit for bit; `val_copy_label_acc`, how often that training example's label
  is theirs; `val_copy_answered_share`, the share of the held-out examples that copying a training label answers
  (the two multiplied); `val_rest_acc`, the references' accuracy on the held-out examples that are no copies.

Cheap: the columns' classifiers are one vectorized pass over at most MAX_HELD_OUT held-out examples (fewer for wide
inputs, down to MIN_HELD_OUT, then the columns sampled, so that inputs x classes x examples stay within MAX_CELLS),
the rest's references one more ridge and 5-NN fit, the copies one hash of each row (and a fit on the others only
where some are copies). Only examples: nothing here runs the model.
"""

import math

import numpy as np
import torch

from harness.column import F64, I64, Column
from harness.reference import _rows, row_keys

COLUMNS = (
    Column(
        "leak_column_acc",
        F64,
        "held-out accuracy of the best single input column's own classifier (a 1-D nearest centroid fitted on the"
        " kept training examples)",
    ),
    Column("leak_column", I64, "index of that column in the flattened inputs (-1: not measured)"),
    Column("leak_rest_acc", F64, "best held-out accuracy of a ridge classifier and 5-NN on every other column"),
    Column(
        "leak_column_z",
        F64,
        "how far that one column predicts the held-out labels better than every other column together, in standard"
        " errors of the paired difference (McNemar); NaN where the column is wrong on over 5% of them or the two"
        " agree on every example",
    ),
    Column(
        "val_copy_share",
        F64,
        "share of validation examples whose inputs are an exact copy of a kept training example's (NaN without"
        " validation)",
    ),
    Column("val_copy_label_acc", F64, "on those copies, how often the training example's label is theirs"),
    Column(
        "val_copy_answered_share",
        F64,
        "share of validation examples answered right by copying a kept training example's label: exact copies"
        " carrying it (NaN without validation)",
    ),
    Column(
        "val_rest_acc",
        F64,
        "the references' accuracy on the validation examples that are no copies (NaN where none is a copy, or all)",
    ),
)

EMPTY = {
    "leak_column_acc": math.nan,
    "leak_column": -1,
    "leak_rest_acc": math.nan,
    "leak_column_z": math.nan,
    "val_copy_share": math.nan,
    "val_copy_label_acc": math.nan,
    "val_copy_answered_share": math.nan,
    "val_rest_acc": math.nan,
}

NEAR_PERFECT = 0.95  # the column's held-out accuracy from which its comparison with the rest is read
MAX_HELD_OUT = 1024  # held-out examples the columns' classifiers are scored on, at most
MIN_HELD_OUT = 128  # and at least (where there are as many), however wide the inputs
MAX_CELLS = 20_000_000  # held-out examples x classes x columns in the columns' pass; beyond it, columns are sampled
CHUNK_CELLS = 2_000_000  # the distances computed at once


def _labels(y) -> np.ndarray:
    return np.asarray(y.cpu() if torch.is_tensor(y) else y).reshape(-1)


def leak_fit(train_x, train_y, val_x=None, val_y=None, seed: int = 0) -> dict:
    """The leak columns described in the module docstring (NaN where they cannot be had)."""
    x, y = _rows(train_x), _labels(train_y)
    rng = np.random.default_rng(seed)
    validated = not (val_x is None or val_y is None or len(val_y) == 0)
    if validated:
        vx, vy = _rows(val_x), _labels(val_y)
    else:  # a quarter of the kept examples held out, as the references do
        order = rng.permutation(len(y))
        cut = int(0.75 * len(y))
        x, y, vx, vy = x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]
    if len(y) < 4 or len(vy) == 0 or len(np.unique(y)) < 2 or x.shape[1] != vx.shape[1]:
        return dict(EMPTY)
    if not np.isfinite(x).all() or not np.isfinite(vx).all():
        return dict(EMPTY)  # non-finite inputs are a finding of their own
    measured = dict(EMPTY)
    if validated:
        measured |= _copies(x, y, vx, vy, rng)
    if x.shape[1] >= 2:
        measured |= _one_column(x, y, vx, vy, rng)
    return measured


def _one_column(x, y, vx, vy, rng: np.random.Generator) -> dict:
    """The best single column's nearest-centroid accuracy, the rest's references, and the paired z between them."""
    from harness.reference import _references

    classes = np.unique(y)
    # Held-out examples bounded so that the distances stay within MAX_CELLS (at least MIN_HELD_OUT of them); columns
    # are sampled only where that many examples of every class still pass it.
    most = max(MIN_HELD_OUT, min(MAX_HELD_OUT, MAX_CELLS // (len(classes) * x.shape[1])))
    if len(vy) > most:
        keep = np.sort(rng.choice(len(vy), most, replace=False))
        vx, vy = vx[keep], vy[keep]
    codes = np.searchsorted(classes, y)
    columns = np.arange(x.shape[1])
    if len(vy) * len(classes) * len(columns) > MAX_CELLS:
        columns = np.sort(rng.choice(columns, max(1, MAX_CELLS // (len(vy) * len(classes))), replace=False))
    onehot = np.zeros((len(classes), len(y)))
    onehot[codes, np.arange(len(y))] = 1.0
    centroids = onehot @ x[:, columns] / onehot.sum(axis=1, keepdims=True)  # classes x columns
    per_chunk = max(1, CHUNK_CELLS // (len(vy) * len(classes)))
    right = np.zeros((len(vy), len(columns)), dtype=bool)
    for start in range(0, len(columns), per_chunk):
        cols = slice(start, start + per_chunk)
        distance = np.abs(vx[:, None, columns[cols]] - centroids[None, :, cols])  # examples x classes x columns
        right[:, cols] = classes[distance.argmin(axis=1)] == vy[:, None]
    best = int(right.mean(axis=0).argmax())
    column = int(columns[best])
    rest, rest_val = _standardized(np.delete(x, column, axis=1), np.delete(vx, column, axis=1), rng)
    linear, neighbours, _ = _references(rest, y, rest_val, vy)
    rest_right = max((model.predict(rest_val) == vy for model in (linear, neighbours)), key=lambda r: r.mean())
    column_right = right[:, best]
    only_column = int((column_right & ~rest_right).sum())
    only_rest = int((rest_right & ~column_right).sum())
    discordant = only_column + only_rest
    judged = discordant and column_right.mean() >= NEAR_PERFECT
    return {
        "leak_column_acc": float(column_right.mean()),
        "leak_column": column,
        "leak_rest_acc": float(rest_right.mean()),
        "leak_column_z": (only_column - only_rest) / math.sqrt(discordant) if judged else math.nan,
    }


def _copies(x, y, vx, vy, rng: np.random.Generator) -> dict:
    """Held-out examples whose inputs are a training example's, bit for bit, and what copying its label answers."""
    from harness.reference import _references

    label_of: dict[bytes, object] = {}
    for key, label in zip(row_keys(x), y, strict=True):
        label_of.setdefault(key, label)
    found = [label_of.get(key) for key in row_keys(vx)]
    copied = np.array([label is not None for label in found])
    share = float(copied.mean())
    agree = np.array([label == truth for label, truth in zip(found, vy, strict=True) if label is not None])
    label_acc = float(agree.mean()) if len(agree) else math.nan
    rest_acc = math.nan  # where every example is a copy, or none is (then it is the references' own, reference_val_acc)
    if 0 < copied.sum() < len(copied):
        rows, rest_rows = _standardized(x, vx[~copied], rng)
        rest_acc = _references(rows, y, rest_rows, vy[~copied])[2]
    return {
        "val_copy_share": share,
        "val_copy_label_acc": label_acc,
        "val_copy_answered_share": share * label_acc if len(agree) else 0.0,
        "val_rest_acc": rest_acc,
    }


def _standardized(x, vx, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The rows as the references read them: projected to MAX_FEATURES where wider, standardized on training's."""
    from harness.reference import MAX_FEATURES

    if x.shape[1] > MAX_FEATURES:
        projection = rng.standard_normal((x.shape[1], MAX_FEATURES)) / math.sqrt(MAX_FEATURES)
        x, vx = x @ projection, vx @ projection
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    return (x - mean) / std, (vx - mean) / std
