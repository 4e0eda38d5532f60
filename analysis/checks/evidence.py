"""The named values a check's evidence sentence may use, beside its own {value} and {threshold}.

A sentence names what it shows, and each name is one of three things: a record column as measured
({first_loss}, harness/columns.py), a feature ({loss_left}, analysis/features.py), or one of `EVIDENCE_VALUES`
below: a value made for reading (a score in its task's metric, an error rate, the forecast's line), computed in
this one place from the run's measurements and features. Where a name is two of these, the evidence value wins,
then the feature. A check whose sentence names anything else fails when it is built (analysis/checks/base.py).

`Evidence` computes a value only when a sentence asks for it, once per run: the forecast's line fits a curve,
and most runs fire no rule that shows it.
"""

import math
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping

from analysis.data_forecast import data_forecast
from analysis.forecast import MIN_STEPS, finite_losses, forecast
from analysis.yardsticks import prior_baseline

# By task; the others score accuracy.
METRIC_NAMES = {"regression": "R²", "multilabel": "per-label accuracy", "sequence": "per-position accuracy"}


def score(value, task) -> str:
    """A score in its task's metric: R² as a number, accuracies as percentages."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "not measured"
    if math.isnan(value):
        return "not measured"
    return f"{value:.2f}" if task == "regression" else f"{value:.0%}"


def forecast_line(measurements: Mapping) -> str:
    """`training loss at 2x the steps (400): 0.31 (0.27 to 0.35), now 0.45`, or why there is no forecast."""
    values = finite_losses(measurements.get("train_loss_curve"))
    made = forecast(values)
    if made is None:
        return f"no forecast of the training loss ({len(values)} finite steps; a curve needs {MIN_STEPS} and a fit)"
    return made.line(2)


def data_line(measurements: Mapping) -> str:
    """The data learning curve and its forecast at twice the examples, or why there is none."""
    made = data_forecast(
        measurements.get("data_curve_examples"),
        measurements.get("data_curve_val_acc"),
        measurements.get("reference_val_examples"),
    )
    return "no data learning curve (it needs quick references)" if made is None else made.line()


def _scored(column: str) -> Callable[[Mapping], str]:
    return lambda m: score(m.get(column), m.get("task"))


def _error(column: str) -> Callable[[Mapping], float]:
    """One minus an accuracy column: how often a quick reference disagrees with the labels."""
    return lambda m: math.nan if m.get(column) is None else 1 - float(m[column])


def _named(column: str) -> Callable[[Mapping], str]:
    """A text column as the sentence shows it: the text, or "unknown" where it is missing or empty."""
    return lambda m: m[column] if isinstance(m.get(column), str) and m[column] else "unknown"


# What to try first for a loop that waits on its loader, by the loader's settings (docs/doctor.md, PyTorch's
# performance tuning guide). A loader that already has workers is not told to give it workers: it is told what
# makes workers fall behind, and that small batches of data already in memory cost more to send between processes
# than to index on the loop's own thread.
MAIN_PROCESS_LOADER_FIXES = (
    "DataLoader(num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=4), or decode and "
    "augment once and cache (PyTorch performance tuning guide)"
)
WORKERS_LOADER_FIXES = (
    "its {workers:.0f} workers fall behind: make a batch cheaper to make (decode and augment once and cache), "
    "persistent_workers=True and a larger prefetch_factor, more workers only where CPUs are idle; for data already "
    "in memory, num_workers=0 or larger batches (each batch is sent between processes)"
)


def loader_fixes(m: Mapping) -> str:
    """What to try first for a starved loop, worded from its loader's workers (a loader not known: as for none)."""
    workers = m.get("loader_workers")
    workers = math.nan if workers is None else float(workers)
    return WORKERS_LOADER_FIXES.format(workers=workers) if workers > 0 else MAIN_PROCESS_LOADER_FIXES


def loader_next_step(m: Mapping) -> str:
    """starved_loader's next step for a loader whose settings are known; "" (the check's own) where they are not."""
    workers = m.get("loader_workers")
    if workers is None or math.isnan(float(workers)):
        return ""
    return f"feed the model faster: {loader_fixes(m)}"


def _classes(m: Mapping) -> float:
    """C from ln C; for regression ln_classes holds the targets' variance, and exp may overflow: NaN then."""
    try:
        return math.exp(float(m.get("ln_classes")))
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _finite(m: Mapping, column: str) -> float | None:
    """A column's value as a float, None where it is missing or NaN."""
    try:
        value = float(m.get(column))
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def altered_loss_line(m: Mapping) -> str:
    """The loss with the probe batch's inputs zeroed or shuffled against the loss on them as they are."""
    ratio = _finite(m, "altered_input_loss_ratio")
    if ratio is None:
        return "the loss on them was not measured (a loss that could not be called on the probe batch as it is)"
    return f"the loss on the altered inputs was {ratio:.3f}x the loss on the real ones"


def copies_against_rest(m: Mapping) -> str:
    """What quick references reach on the validation examples that are no copies of training examples."""
    rest = _finite(m, "val_rest_acc")
    if rest is None:
        return "no validation example is left that is not such a copy"
    return f"quick references reach {rest:.0%} on the others"


def _names_listed(names, shown: int = 6) -> str:
    """The first `shown` names, comma-separated, and how many more there are."""
    names = [str(n) for n in (names if names is not None else [])]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


EVIDENCE_VALUES: dict[str, Callable[[Mapping], object]] = {
    "metric_name": lambda m: METRIC_NAMES.get(m.get("task"), "accuracy"),
    "val_score": _scored("final_val_acc"),
    "train_score": _scored("final_train_acc"),
    "reference_score": _scored("reference_val_acc"),
    # what always answering the most frequent label scores: the features' baseline (validation, else the prior)
    "baseline_score": lambda m: score(prior_baseline(m), m.get("task")),
    "periodic_spikes_seen": lambda m: (m.get("periodic_spikes") or 0) + 1,  # spikes at a period: gaps + 1
    "loo_error": _error("reference_loo_acc"),
    "knn_val_error": _error("reference_knn_val_acc"),
    "ridge_train_error": _error("reference_train_acc"),
    "ridge_val_error": _error("reference_linear_val_acc"),
    "output_layer": _named("output_layer"),
    "loss_kind": _named("loss_kind"),
    "classes": _classes,
    "loss_spike_steps": lambda m: list(m["loss_spike_steps"]) if m.get("loss_spike_steps") is not None else [],
    "forecast_line": forecast_line,
    "data_line": data_line,
    "altered_loss_line": altered_loss_line,
    "copies_against_rest": copies_against_rest,
    "loader_next_step": loader_next_step,
    "unchanged_param_names": lambda m: _names_listed(m.get("unchanged_params")),
}


class Evidence(Mapping):
    """The named values of one run, computed when a sentence first asks for one.

    `measurements` is keyed like a record; `values` are its features (analysis.features.features).
    """

    def __init__(self, measurements: Mapping, values: Mapping):
        self.measurements, self.values = measurements, values
        self._made: dict[str, object] = {}

    def __getitem__(self, name: str):
        if name not in self._made:
            if name in EVIDENCE_VALUES:
                self._made[name] = EVIDENCE_VALUES[name](self.measurements)
            elif name in self.values:
                self._made[name] = self.values[name]
            else:
                self._made[name] = self.measurements[name]  # KeyError: the run has no such measurement
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self.measurements, **self.values, **EVIDENCE_VALUES})

    def __len__(self) -> int:
        return len({**self.measurements, **self.values, **EVIDENCE_VALUES})

    def sentence(self, template: str, value: float, threshold: float) -> str:
        """`template` filled with this run's named values, and the rule's own value and threshold."""
        return template.format_map(ChainMap({"value": value, "threshold": threshold}, self))
