"""What one feature is: a named quantity, what it is normalized by, and the record columns it may read.

`Feature` checks its `reads` against the record's columns when it is declared and lets its computation see
those columns alone (`_Declared`). `column`, `ratio` and `finite_curve` are what every formula is written with
(analysis/yardsticks.py, analysis/loss_curves.py, and the one-line formulas of analysis/declarations/): a column
as a number, NaN where it is missing or no number, so that a missing measurement leaves a feature NaN (not
judged) rather than raising.
"""

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.columns import NAMES as COLUMN_NAMES


def column(m: Mapping, key: str) -> float:
    """The column `key` of the measurements as a number: NaN where it is missing or not a number."""
    value = m.get(key)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def ratio(a: float, b: float) -> float:
    """A / b, infinite for a positive a over 0, NaN where it means nothing."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if b == 0:
        return math.inf if a > 0 else math.nan
    return a / b


def finite_curve(m: Mapping, key: str) -> list[float]:
    """The curve `key` of the measurements, its missing and non-finite points left out."""
    values = m.get(key)
    return [float(v) for v in (values if values is not None else []) if v is not None and math.isfinite(v)]


@dataclass(frozen=True)
class Feature:
    """One named quantity the rules may read, and the record columns it is computed from.

    `reads` is checked against the record's columns when the feature is built (an unknown name raises at import,
    naming the nearest columns), and `compute` sees only those columns: reading one it does not declare raises,
    where it would otherwise read a silent NaN.
    """

    name: str
    sentence: str
    normalized_by: str
    log: bool
    compute: Callable[[Mapping], float]
    reads: tuple[str, ...] = ()

    def __post_init__(self):
        for column in self.reads:
            if column not in COLUMN_NAMES:
                near = difflib.get_close_matches(column, sorted(COLUMN_NAMES), n=5)
                raise ValueError(
                    f"feature {self.name} reads {column!r}, which is no record column; nearest: {', '.join(near)}"
                )

    def of(self, measurements: Mapping) -> float:
        """The feature of one run's measurements, computed on its declared columns alone."""
        return float(self.compute(_Declared(measurements, self)))


class _Declared(Mapping):
    """A run's measurements as one feature may read them: its declared columns, and no other."""

    __slots__ = ("_feature", "_measurements")

    def __init__(self, measurements: Mapping, feature: Feature):
        self._measurements, self._feature = measurements, feature

    def _check(self, key: str) -> None:
        if key not in self._feature.reads:
            raise KeyError(
                f"feature {self._feature.name} reads {key!r}, which it does not declare (reads="
                f"{self._feature.reads}): add it to the feature's reads"
            )

    def __getitem__(self, key: str):
        self._check(key)
        return self._measurements[key]

    def get(self, key: str, default=None):
        self._check(key)
        return self._measurements.get(key, default)

    def __contains__(self, key) -> bool:
        self._check(key)
        return key in self._measurements

    def __iter__(self):
        return (key for key in self._feature.reads if key in self._measurements)

    def __len__(self) -> int:
        return sum(1 for _ in self)
