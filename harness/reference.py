"""A reference on the run's own data: what simple models reach on the same features and labels.

Several checks cannot be read against fixed numbers: "validation accuracy far above chance" means 0.9 on an easy
ten-class problem and 0.65 on a hard two-class one. So the run provides its own yardsticks, computed in well
under a second from the examples the loop was fed (the instruments keep the first 1024) and the validation
examples, if any:

- `baseline_val_acc`: the accuracy of always answering the most frequent training label: what a model that
  learned nothing from the inputs reaches (the class prior, not 1/C).
- `reference_val_acc`: the better held-out accuracy of two quick references trained on the same training
  examples and labels, a ridge classifier (linear, one least-squares solve) and 5 nearest neighbours (local,
  non-linear). If the
  labels carry information about the inputs, at least one of them finds some; if the training labels are
  unrelated to the inputs, both stay at the baseline.
- `reference_train_acc`: the ridge classifier's accuracy on its own training examples: how well a linear
  model fits them.
- `reference_linear_val_acc`: the ridge classifier's validation accuracy. Against `reference_train_acc`: on
  clean labels a linear model does about as well on validation as on its own examples; wrong training labels
  lower its training score alone (it cannot fit them, validation is scored on the truth).
- `reference_loo_acc` and `reference_knn_val_acc`: how often an example's 5 nearest training neighbours agree
  with its label, on the training examples themselves (leaving each one out) and on validation. On clean
  labels the two agree; wrong training labels lower the first alone.
- `reference_val_examples`: how many held-out examples those accuracies rest on (their sampling error), and
  `reference_val_distinct` how many of them differ (a validation set of repeated rows is as good as its distinct
  ones).
- `prior_shift`: how many times more frequent the class most under-represented in training is in validation
  (1 when both share the class mix; NaN without validation), and `prior_shift_class_examples` the validation
  examples of that class: the count the shift rests on.
- `data_curve_examples` and `data_curve_val_acc`: a data learning curve. The references are fitted again on
  growing shares of the same training examples (CURVE_SHARES: an eighth, a quarter, a half, all), each share a
  random subset of the next, and scored on the same held-out examples; each point is the mean of CURVE_REPEATS
  random orders (one order leaves the small shares at the mercy of which few examples were drawn). Where the
  curve still rises at its last doubling, more examples would raise what the data supports: the question "would
  more data help?" (analysis/data_forecast.py reads it). A share too small to fit (under CURVE_MIN_EXAMPLES, or
  a single class) is left out.

Without validation examples, a quarter of the kept training examples is held out for the references and the
baseline. Inputs are flattened to rows and standardized with the training rows' statistics; rows of more than
512 features are randomly projected to 512 first, so the cost stays small for images.
"""

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from harness.column import F64, I64, NOT_ALONG_THE_RUN, Column, list_of

if TYPE_CHECKING:  # scikit-learn is loaded when a reference is fitted, so `import doctor` does not load it
    from sklearn.linear_model import RidgeClassifier
    from sklearn.neighbors import KNeighborsClassifier

# What `reference_fit` returns (EMPTY where there is nothing to fit), from the first training examples and validation.
COLUMNS = (
    Column("baseline_val_acc", F64, "validation accuracy of always answering the most frequent training label"),
    Column("reference_val_acc", F64, "best validation accuracy of a ridge classifier and 5-NN on the same examples"),
    Column("reference_train_acc", F64, "the ridge classifier's accuracy on its own training examples"),
    Column("reference_linear_val_acc", F64, "the ridge classifier's validation accuracy"),
    Column("reference_loo_acc", F64, "5-NN leave-one-out accuracy on the reference's training examples"),
    Column("reference_knn_val_acc", F64, "5-NN accuracy on validation, trained on those examples"),
    Column("prior_shift", F64, "most under-represented training class: its validation share over its training share"),
    Column("reference_examples", I64, "distinct training examples the references were fitted on"),
    Column("reference_val_examples", I64, "held-out examples the references were scored on"),
    Column("reference_val_distinct", I64, "distinct held-out examples (rows of inputs) the references were scored on"),
    Column("prior_shift_class_examples", I64, "validation examples of the class prior_shift is read on"),
    Column(
        "data_curve_examples",
        list_of(I64),
        "data learning curve: training examples the references were refitted on",
        along=NOT_ALONG_THE_RUN,
    ),
    Column(
        "data_curve_val_acc",
        list_of(F64),
        "data learning curve: the references' validation accuracy at each size",
        along=NOT_ALONG_THE_RUN,
    ),
)

MAX_FEATURES = 512
CURVE_SHARES = (1 / 8, 1 / 4, 1 / 2)  # the smaller shares of the data learning curve; the whole set is the last
CURVE_REPEATS = 3
CURVE_MIN_EXAMPLES = 8  # fewer examples than this say nothing a 5-NN vote can be trusted on
EMPTY = {
    "baseline_val_acc": math.nan,
    "reference_val_acc": math.nan,
    "reference_train_acc": math.nan,
    "reference_linear_val_acc": math.nan,
    "reference_loo_acc": math.nan,
    "reference_knn_val_acc": math.nan,
    "prior_shift": math.nan,
    "reference_examples": 0,
    "reference_val_examples": 0,
    "reference_val_distinct": 0,
    "prior_shift_class_examples": 0,
    "data_curve_examples": [],
    "data_curve_val_acc": [],
}


def _rows(x) -> np.ndarray:
    array = x.detach().cpu().double().numpy() if torch.is_tensor(x) else np.asarray(x, dtype=np.float64)
    return array.reshape(len(array), -1)


def reference_fit(train_x, train_y, val_x=None, val_y=None, seed: int = 0) -> dict:
    """The baseline and reference accuracies described in the module docstring (NaN where they cannot be had)."""
    x, y = _rows(train_x), np.asarray(train_y.cpu() if torch.is_tensor(train_y) else train_y).reshape(-1)
    rng = np.random.default_rng(seed)
    validated = not (val_x is None or val_y is None or len(val_y) == 0)
    if not validated:
        order = rng.permutation(len(y))
        cut = int(0.75 * len(y))
        x, y, vx, vy = x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]
    else:
        vx, vy = _rows(val_x), np.asarray(val_y.cpu() if torch.is_tensor(val_y) else val_y).reshape(-1)
    if len(y) < 4 or len(vy) == 0 or len(np.unique(y)) < 2:
        return dict(EMPTY)
    finite = np.isfinite(x).all(axis=1)
    if not finite.all() or not np.isfinite(vx).all():
        return dict(EMPTY)  # non-finite inputs are a finding of their own
    raw_vx = vx  # distinct rows are counted before the projection and the scaling
    values, counts = np.unique(y, return_counts=True)
    majority = values[counts.argmax()]
    if x.shape[1] > MAX_FEATURES:
        projection = rng.standard_normal((x.shape[1], MAX_FEATURES)) / math.sqrt(MAX_FEATURES)
        x, vx = x @ projection, vx @ projection
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    x, vx = (x - mean) / std, (vx - mean) / std
    linear, neighbours, full = _references(x, y, vx, vy)
    from sklearn.neighbors import KNeighborsClassifier

    # Leave-one-out 5-NN on the training examples: the nearest neighbour of each is itself, so ask for six.
    k = min(5, len(y) - 1)
    index = KNeighborsClassifier(n_neighbors=k + 1).fit(x, y).kneighbors(x, return_distance=False)[:, 1:]
    votes = np.array([np.bincount(np.searchsorted(values, y[row]), minlength=len(values)).argmax() for row in index])
    train_share = {v: c / len(y) for v, c in zip(values, counts, strict=True)}
    val_values, val_counts = np.unique(vy, return_counts=True)
    shifts = [c / len(vy) / train_share.get(v, 1 / len(y)) for v, c in zip(val_values, val_counts, strict=True)]
    shifted = int(np.argmax(shifts))
    return {
        "baseline_val_acc": float((vy == majority).mean()),
        "reference_val_acc": full,
        "reference_train_acc": float(linear.score(x, y)),
        "reference_linear_val_acc": float(linear.score(vx, vy)),
        "reference_loo_acc": float((values[votes] == y).mean()),
        "reference_knn_val_acc": float(neighbours.score(vx, vy)),
        "prior_shift": float(shifts[shifted]) if validated else math.nan,
        "prior_shift_class_examples": int(val_counts[shifted]) if validated else 0,
        "reference_examples": len(y),
        "reference_val_examples": len(vy),
        "reference_val_distinct": _distinct_rows(raw_vx),
        **_data_curve(x, y, vx, vy, full, rng),
    }


def row_keys(rows: np.ndarray) -> list[bytes]:
    """Each row's exact bytes: equal for a copied example, not for a re-normalised one (harness/leak.py reads them)."""
    return [row.tobytes() for row in np.ascontiguousarray(rows)]


def _distinct_rows(rows: np.ndarray) -> int:
    """How many of the rows differ, bit for bit."""
    return len(set(row_keys(rows)))


def _references(x, y, vx, vy) -> tuple["RidgeClassifier", "KNeighborsClassifier", float]:
    """The ridge classifier and 5-NN fitted on (x, y), and the better held-out accuracy of the two."""
    from sklearn.linear_model import RidgeClassifier
    from sklearn.neighbors import KNeighborsClassifier

    linear = RidgeClassifier(alpha=1.0).fit(x, y)  # milliseconds; a logistic regression took 100 times as long
    neighbours = KNeighborsClassifier(n_neighbors=min(5, len(y))).fit(x, y)
    return linear, neighbours, float(max(linear.score(vx, vy), neighbours.score(vx, vy)))


def _data_curve(x, y, vx, vy, full: float, rng: "np.random.Generator") -> dict:
    """The references' held-out accuracy on growing shares of the training examples (module docstring)."""
    sizes = sorted({round(share * len(y)) for share in CURVE_SHARES} - {len(y)})
    examples, accuracies = [], []
    orders = [rng.permutation(len(y)) for _ in range(CURVE_REPEATS)]
    for size in sizes:
        if size < CURVE_MIN_EXAMPLES:
            continue
        scores = [
            _references(x[order[:size]], y[order[:size]], vx, vy)[2]
            for order in orders
            if len(np.unique(y[order[:size]])) > 1
        ]
        if len(scores) == len(orders):
            examples.append(size)
            accuracies.append(float(np.mean(scores)))
    return {"data_curve_examples": [*examples, len(y)], "data_curve_val_acc": [*accuracies, full]}
