"""Checks of a recipe before anything trains: every knob in its range, every dataset fit to be split and batched.

A knob out of range (`loop.steps=0`, `data.val_fraction=1.5`) or a dataset that cannot make a classification
problem (one class, NaN features, a class with a single example) would otherwise reach the cells: at best every
cell fails with the same error, at worst a cell is recorded `ok` with numbers that mean nothing (one class: a
first loss of 0 and validation accuracy 1.0, which the rules then call `lr_too_low`). The grid sweeper checks
the knobs of every cell of a sweep, and `harness.sweep.run_cells` the datasets of the cells left to run, both
before the first cell runs; the command line checks a single cell, and `harness.data` checks each dataset again
when a cell loads it. Each problem is one line naming the key or the dataset and what is valid.

No torch here: the sweep's parent process runs these checks and never imports torch.
"""

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.recipe import CONF

BATCH_KINDS = ("indexed", "dataloader")
BATCH_ORDERS = ("shuffled", "fixed", "class_sorted")  # the order examples are fed in (harness/data.py)
OUTPUTS = (
    "logits",
    "softmax",
    "log_softmax",
    "relu",
    "sigmoid",
    "tanh",
)  # what the model's head hands to the loss (harness/model.py)
TARGET_ENCODINGS = ("index", "onehot", "pm_one")  # how the loop hands the class labels to the loss (harness/cell.py)
# the grid's loss functions (harness/cell.py); bce: on target rows; nll: NLLLoss, on log-probabilities
LOSS_NAMES = ("cross_entropy", "mse", "bce", "nll")
WEIGHT_INITS = ("default", "glorot_uniform")  # how the Linear layers' weights start (harness/model.py)


class ConfigError(ValueError):
    """Bad input found before any cell runs; each argument is one line for the user, naming what is valid.

    `harness.sweep.run_cells` raises it for a records folder it cannot write and for datasets that cannot be split.
    The command line (the grid sweeper, hydra_plugins/doctor_grid_sweeper) says each line as `error: <line>` on
    stderr and exits with status 2: raised through Hydra, it would be a traceback and status 1.
    """

    def __init__(self, *lines: str):
        super().__init__(*lines)
        self.lines = lines

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(low: int) -> tuple[Callable, str]:
    return (lambda v: _integer(v) and v >= low), f"an integer >= {low}"


def _between(low: float, high: float, low_open: bool, high_open: bool) -> tuple[Callable, str]:
    def ok(v) -> bool:
        return _number(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    return ok, f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


# numpy's legacy seeding (np.random.seed, scikit-learn's random_state) takes 0 to 2**32 - 1: a seed outside it would
# fail every cell of the grid with the same ValueError, after the sweep has started.
SEED_MAX = 2**32 - 1

_BOOL = ((lambda v: isinstance(v, bool)), "true or false")
_POSITIVE = ((lambda v: _number(v) and v > 0), "a finite number > 0")
_NON_NEGATIVE = ((lambda v: _number(v) and v >= 0), "a finite number >= 0")

ACTIVATIONS = ("relu", "tanh", "sigmoid")  # the hidden layers' activation (harness/model.py)
NORMS = ("pre", "post")  # where a transformer block's LayerNorm sits (harness/model.py)
CHOICES = {  # what a knob's range `{one of NAME}` may name: the lists the code that reads the knob implements
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and isinstance(value, tuple) and all(isinstance(v, str) for v in value)
}


def _one_of(choices: tuple[str, ...]) -> tuple[Callable, str]:
    return (lambda v: v in choices), (
        " or ".join(choices) if len(choices) < 3 else f"{', '.join(choices[:-1])} or {choices[-1]}"
    )


def _list_of(valid: Callable, what: str, least: int = 0) -> tuple[Callable, str]:
    return (lambda v: isinstance(v, list) and len(v) >= least and all(valid(i) for i in v)), what


# A knob's range is written where the knob is declared: the first words of its comment in conf/config.yaml or in a
# conf/model/ file, in braces, `loop.steps: 600  # {integer >= 1} ...`. Each form below reads as what it accepts.
RANGE_FORMS: list[tuple[str, Callable[..., tuple[Callable, str]]]] = [
    (r"true/false", lambda: _BOOL),
    (r"integer", lambda: (_integer, "an integer")),
    (r"integer >= (\d+)", lambda low: _int_at_least(int(low))),
    (r"> 0", lambda: _POSITIVE),
    (r">= 0", lambda: _NON_NEGATIVE),
    (r"number or null", lambda: ((lambda v: v is None or _number(v)), "a number or null")),
    (r"> 0 or null", lambda: ((lambda v: v is None or _POSITIVE[0](v)), "a finite number > 0 or null")),
    (
        r"in ([(\[])([-\d.e]+), ([-\d.e]+)([)\]])",
        lambda left, low, high, right: _between(float(low), float(high), left == "(", right == ")"),
    ),
    (r"list of integers >= (\d+)", lambda low: _list_of(_int_at_least(int(low))[0], f"a list of integers >= {low}")),
    (r"list of rates > 0", lambda: _list_of(_POSITIVE[0], "a list of rates > 0")),
    (r"one or more rates > 0", lambda: _list_of(_POSITIVE[0], "a list of one or more rates > 0", least=1)),
    (
        r"seed",
        lambda: (
            (lambda v: _integer(v) and 0 <= v <= SEED_MAX),
            f"an integer from 0 to {SEED_MAX} (numpy's seed range)",
        ),
    ),
    (r"one of ([A-Z_]+)", lambda name: _one_of(CHOICES[name])),
]
_RANGE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_]\w*):(?P<value>[^#]*)(#\s*\{(?P<range>[^}]*)\})?")


def parse_range(text: str, where: str) -> tuple[Callable, str]:
    """The check and the words of one range as written in braces; a range of no known form is an error, naming them."""
    for form, build in RANGE_FORMS:
        match = re.fullmatch(form, text.strip())
        if match and not (form.startswith("one of") and match.group(1) not in CHOICES):
            return build(*match.groups())
    forms = "; ".join(form.replace("\\", "") for form, _ in RANGE_FORMS)
    raise ValueError(f"{where}: the range {{{text}}} is of no known form ({forms}; one of: {', '.join(CHOICES)})")


def declared_ranges(path: Path, prefix: str = "") -> dict[str, tuple[Callable, str]]:
    """Each knob of a YAML file whose comment opens with its range, by dotted key, in the file's order.

    Read from the text, line by line: YAML drops comments. A key with no value on its line opens a mapping whose
    knobs are indented below it.
    """
    found, parents = {}, []  # parents: (indent, key) of the mappings the line is inside
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _RANGE.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        parents = [(i, k) for i, k in parents if i < indent]
        key = ".".join([prefix, *(k for _, k in parents), match["key"]]).lstrip(".")
        if not match["value"].strip():
            parents.append((indent, match["key"]))
        if match["range"] is not None:
            found[key] = parse_range(match["range"], f"{path.name}:{number} {key}")
    return found


def _all_declared_ranges() -> dict[str, tuple[Callable, str]]:
    """The ranges of conf/config.yaml's knobs, then the model files' (a key in two files: one range, or an error)."""
    knobs = declared_ranges(CONF / "config.yaml")
    where: dict[str, str] = {}
    for path in sorted((CONF / "model").glob("*.yaml")):
        for key, (valid, what) in declared_ranges(path, "model").items():
            if key in knobs and knobs[key][1] != what:
                raise ValueError(f"{key} has two ranges: {knobs[key][1]} in {where[key]}, {what} in {path.name}")
            knobs[key], where[key] = (valid, what), path.name
    return knobs


# Every knob with a range, from its declaration: a value out of it is refused before any cell runs. A key a recipe
# does not have (a model family without `dropout`) is not checked.
KNOBS: dict[str, tuple[Callable, str]] = _all_declared_ranges()


def knob_problems(cfg: DictConfig | dict) -> list[str]:
    """One line per knob of `cfg` that is out of its range, e.g. `loop.steps=0: must be an integer >= 1`."""
    values = _plain(cfg)
    problems = []
    for key, (valid, what) in KNOBS.items():
        value = _select(values, key)
        if value is not _ABSENT and not valid(value):
            problems.append(f"{key}={value!r} is out of range: it must be {what}")
    return problems


_ABSENT = object()


def n_jobs_problem(n_jobs) -> str | None:
    """What is wrong with the sweep's worker count (`hydra.sweeper.n_jobs`, `make sweep JOBS=N`); None if nothing.

    joblib takes any non-zero integer: N >= 1 workers, or a negative one counted back from the CPU cores (-1 every
    core, -2 all but one; never fewer than one worker). 0 it refuses with a traceback, and only once the sweep runs.
    """
    if _integer(n_jobs) and n_jobs != 0:
        return None
    return (
        f"hydra.sweeper.n_jobs={n_jobs!r} is out of range: it must be a number of workers >= 1, or negative to count "
        "back from the CPU cores (-1 every core, -2 all but one); `make sweep JOBS=N` sets it"
    )


def _plain(cfg: DictConfig | dict) -> dict:
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


def _select(values: dict, key: str):
    """`values["a"]["b"]` for key "a.b", or _ABSENT."""
    for part in key.split("."):
        if not isinstance(values, dict) or part not in values:
            return _ABSENT
        values = values[part]
    return values


def dataset_problem(name: str, features: np.ndarray, labels: np.ndarray, val_fraction: float) -> str | None:
    """What keeps `(features, labels)` from being split into a classification problem; None if nothing does.

    At least two classes; finite features, one row per label; at least two examples of every class (the split is
    stratified) and, on each side of the split, at least one example per class.
    """
    if features.ndim != 2 or len(features) != len(labels):
        return f"dataset {name}: X must be 2-D with one row per label, got X {features.shape} and {len(labels)} labels"
    bad = ~np.isfinite(features)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        return (
            f"dataset {name}: {int(bad.sum())} feature values are NaN or infinite (the first at row {row}, "
            f"column {column}); clean or impute them in the loader"
        )
    classes, counts = np.unique(labels, return_counts=True)
    if len(classes) < 2:
        only = f" ({classes[0].item()!r} only)" if len(classes) else ""
        return f"dataset {name} has {len(classes)} class{only}: a classifier needs at least two"
    if counts.min() < 2:
        rare = classes[counts.argmin()].item()
        return (
            f"dataset {name}: class {rare!r} has {counts.min()} example; the stratified split needs at least 2 of "
            "every class"
        )
    n_val = math.ceil(val_fraction * len(labels))  # what scikit-learn's train_test_split takes for a float test_size
    n_train = len(labels) - n_val
    if min(n_val, n_train) < len(classes):
        return (
            f"dataset {name}: {len(labels)} examples split {n_train} train / {n_val} validation "
            f"(data.val_fraction={val_fraction:g}), fewer than its {len(classes)} classes on one side"
        )
    return None


_LOADED: dict[str, tuple[np.ndarray, np.ndarray] | str] = {}  # the dataset's spec as JSON -> its data, or why not


def load_dataset(dataset_cfg: DictConfig) -> tuple[np.ndarray, np.ndarray]:
    """`(features, labels)` from the dataset's loader: labels as given, features as float32. Errors as ValueError."""
    try:
        loaded = instantiate(dataset_cfg.loader)
    except Exception as error:  # whatever the user's loader raises, said in one line (re-raised)
        cause = error.__cause__ or error  # Hydra wraps the loader's own exception in a multi-line one
        what = " ".join(str(cause).split())
        raise ValueError(f"dataset {dataset_cfg.name}: its loader raised {type(cause).__name__}: {what}") from error
    if not (isinstance(loaded, tuple | list) and len(loaded) == 2):
        raise ValueError(f"dataset {dataset_cfg.name}: loader must return (X, y), got {type(loaded).__name__}")
    try:
        features = np.asarray(loaded[0], dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ValueError(f"dataset {dataset_cfg.name}: X is not numeric ({error})") from None
    return features, np.asarray(loaded[1])


def _load_or_why(dataset: dict) -> tuple[np.ndarray, np.ndarray] | str:
    try:
        return load_dataset(OmegaConf.create(dataset))
    except ValueError as error:  # load_dataset says in one line whatever the loader raised
        return str(error)


def _datasets_of(cells: Iterable[DictConfig | dict]) -> Iterator[tuple[dict, object]]:
    """For each cell whose dataset names a loader, in order: its dataset spec and its data.val_fraction (or _ABSENT)."""
    for cell in cells:
        dataset = _plain(cell["dataset"]) if "dataset" in cell else None
        if isinstance(dataset, dict) and "loader" in dataset:
            yield dataset, (_select(_plain(cell["data"]), "val_fraction") if "data" in cell else _ABSENT)


def distinct_datasets(cells: Iterable[DictConfig | dict]) -> list[dict]:
    """One small plain cell per distinct dataset and split of these cells, in order of first appearance.

    `dataset_problems` of these says exactly what it says of all the cells, in the same order: a sweep sends
    these to a worker to check, not every cell's config.
    """
    distinct: dict[str, dict] = {}
    for dataset, fraction in _datasets_of(cells):
        data = {} if fraction is _ABSENT else {"data": {"val_fraction": fraction}}
        key = json.dumps([dataset, data], sort_keys=True, default=str)
        distinct.setdefault(key, {"dataset": dataset, **data})
    return list(distinct.values())


def cell_problems(cells: Iterable[DictConfig | dict]) -> list[str]:
    """Every distinct problem of these resolved cells: knobs out of range, then datasets that cannot be split."""
    cells = [_plain(cell) for cell in cells]
    return list(dict.fromkeys([p for cell in cells for p in knob_problems(cell)] + dataset_problems(cells)))


def dataset_problems(cells: Iterable[DictConfig | dict], keep: bool = True) -> list[str]:
    """Every distinct problem of the datasets of these cells (see `dataset_problem`), one line each.

    Each dataset is loaded once per loader spec (the zoo's hundreds of cells share thirteen) and, with `keep`,
    kept for the process's life, so a second check of the same dataset costs nothing. A sweep's worker checks
    with `keep=False`: its cells load their own data, and it does not carry the datasets through them.
    """
    problems: dict[str, None] = {}  # an ordered set: one line per distinct problem, however many cells share it
    split_checked: set[tuple[str, float]] = set()
    cache = _LOADED if keep else {}
    for dataset, fraction in _datasets_of(cells):
        key = json.dumps(dataset, sort_keys=True, default=str)
        if key not in cache:
            cache[key] = _LOADED[key] if key in _LOADED else _load_or_why(dataset)
        loaded = cache[key]
        if isinstance(loaded, str):
            problems[loaded] = None
        elif _number(fraction) and 0 < fraction < 1 and (key, fraction) not in split_checked:
            split_checked.add((key, fraction))
            problem = dataset_problem(dataset.get("name", "?"), *loaded, fraction)
            if problem:
                problems[problem] = None
    return list(problems)
