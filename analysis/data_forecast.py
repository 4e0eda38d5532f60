"""Would more data help? The references' data learning curve, carried to twice the examples.

harness/reference.py fits the quick references (a ridge classifier and 5 nearest neighbours) again on an eighth,
a quarter, a half and all of the run's kept training examples and scores each on the same held-out examples
(`data_curve_examples`, `data_curve_val_acc`). On most problems the held-out error of a learner falls with the
number of examples n roughly as a power law, error ~ n ** slope with a negative slope, so every doubling of the
examples shrinks the error by the same factor (the classic learning-curve form; Cortes et al., NeurIPS 1993,
"Learning curves: asymptotic values and rate of convergence"; Hestness et al., 2017, "Deep learning scaling is
predictable, empirically"). The slope is fitted by least squares on log error against log n over the last
LAST_POINTS sizes (the small shares are noisy and sit before the curve settles into its power law), and the
error at twice the examples is the error now shrunk by one more doubling's factor.

The forecast is an upper estimate: a real curve flattens towards an error floor that more data cannot pass, which
the pure power law ignores. It is read as a share of the room above the baseline (`data_gain` in
analysis/yardsticks.py), which `overfitting` reads together with the run's train-validation gap: a model that fits
its training examples far better than validation, on data whose curve still rises steeply, was given too few
examples for what it can fit. Whether it tells planted overfitting from healthy runs better than the gap alone:
analysis/data_curve_study.py (`python -m analysis data-curve`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LAST_POINTS = 3  # sizes the slope is fitted on: the whole set and the two halvings below it
MIN_POINTS = 2  # fewer sizes give no slope


@dataclass(frozen=True)
class DataForecast:
    """The references' held-out accuracy at each size they were fitted on, and forecast at twice the examples."""

    examples: tuple[int, ...]
    accuracies: tuple[float, ...]
    slope: float  # of log error against log examples over the last sizes (0 when the error did not fall)

    @property
    def now(self) -> float:
        return self.accuracies[-1]

    @property
    def doubled(self) -> float:
        """The accuracy forecast at twice the examples: the error now, shrunk by one more doubling's factor."""
        return 1 - (1 - self.now) * 2.0**self.slope

    @property
    def gain(self) -> float:
        """Accuracy points the references are forecast to gain from twice the examples (0 or more)."""
        return self.doubled - self.now

    def line(self) -> str:
        """The curve and its forecast in one line, for the report."""
        sizes = ", ".join(str(n) for n in self.examples)
        scores = ", ".join(f"{a:.0%}" for a in self.accuracies)
        return (
            f"quick references fitted on {sizes} of the training examples reach {scores} on held-out examples;"
            f" at twice the examples ({2 * self.examples[-1]}) {self.doubled:.0%} (+{100 * self.gain:.1f} points)"
        )


def data_forecast(
    examples: Sequence[float] | None, accuracies: Sequence[float] | None, held_out: float | None = None
) -> DataForecast | None:
    """The forecast from a data learning curve, or None when it has fewer than MIN_POINTS finite sizes.

    `held_out`: how many examples the accuracies were scored on; an error of 0 is read as half an example's
    error there (a perfect score on 200 examples is not an error of exactly 0), else as 1e-4.
    """
    pairs = [
        (int(n), float(a))
        for n, a in zip(
            examples if examples is not None else [], accuracies if accuracies is not None else [], strict=False
        )
        if n is not None and a is not None and n > 0 and math.isfinite(a)
    ]
    if len(pairs) < MIN_POINTS:
        return None
    sizes, scores = zip(*pairs, strict=True)
    floor = 0.5 / held_out if held_out and held_out > 0 else 1e-4
    last = pairs[-LAST_POINTS:]
    log_n = np.log([n for n, _ in last])
    log_error = np.log([max(1 - a, floor) for _, a in last])
    slope = float(np.polyfit(log_n, log_error, 1)[0])
    return DataForecast(tuple(sizes), tuple(scores), min(slope, 0.0))
