"""Recipe files: a user's training run described in plain Python, for the command line.

A recipe file defines
    model()              -> a fresh nn.Module                                        (required)
    batches()            -> an iterable of batches, e.g. a DataLoader: one epoch    (required)
    loss                 -> the loss function, e.g. nn.CrossEntropyLoss()          (required)
    optimizer(params)    -> a torch.optim optimizer                   (required)
    validation()         -> an iterable of (inputs, targets)          (optional: validation accuracy)
    STEPS                -> steps of the doctor's own probe loop, default 300       (optional)
    INPUTS, TARGETS      -> where a batch keeps its inputs and targets, when the doctor cannot tell (optional):
                            an int (a tuple item), a str (a dict key or attribute), a tuple of them, or a function
    OUTPUT               -> which part of the model's output the loss reads, when it is not a tensor (optional)
    train(Doctor)        -> runs the user's own loop with the doctor's three lines and returns the doctor
                            (optional: without it the doctor runs its probe loop on the pieces above)

Batches can be (inputs, targets) pairs, longer tuples whose last item is the targets (several inputs), dicts
with a "labels", "label", "targets", "target" or "y" key (the other keys the model's keyword inputs), or objects
with such attributes; the model's output a tensor, or a dict or object holding "logits". The task is read from the
targets and the model's output: class indices with (batch, C) logits, one-hot rows, 0/1 targets with one output
unit, multi-label rows, or regression targets shaped like the output. Batches whose inputs and targets the
doctor cannot find (and INPUTS/TARGETS do not say) and targets that fit no output are refused (exit status 2), as
is a recipe that lacks a required name (RecipeError). An exception raised by the recipe's own code (a
syntax error, an error in its model, loss or data) is the user's, and passes through with its traceback (exit
status 3).

A step or time budget (`run(..., max_steps=N, max_seconds=S)`, the command line's --max-steps and --max-seconds)
cuts the probe loop or train()'s loop short wherever it iterates the doctor (doctor.watch), and the report says so.
`run(..., fit_steps=N)` cuts the doctor's own fits of fresh models after the run (memorization and the capacity
fit, each rate) to at most N steps: the benchmarks' tests run every program so, to check that it runs, not what
the fits find.
Ctrl-C during the probe loop or train() ends it with the report of the steps so far, saying it was interrupted;
before the first training step it raises `Interrupted` (doctor/refusals.py).

The report points each finding at the recipe's lines its next step is about ("where: recipe.py:12: ..."): the
optimizer's for a rate, the model's for an activation or a layer, the loss's, the batches' for the data, and
train()'s for the loop's own mistakes (PARTS below).
"""

import ast
import dataclasses
import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from analysis import checks
from doctor.options import check_budgets, checked_limit
from doctor.probe_loop import final_report, probe, stopped_by_user
from doctor.refusals import CannotJudge
from doctor.report import Report
from doctor.watch import Doctor
from harness.instruments.memorization import CAPACITY_STEPS, MEMORIZE_STEPS

REQUIRED = ("model", "batches", "loss", "optimizer")

# Which of the recipe's names each verdict's next step is about (each check's `parts`, analysis/checks/): the
# report points at their lines ("where:"). The loop's own mistakes live in train(); a recipe without one has no
# loop of its own to point at.
PARTS = checks.PARTS


class RecipeError(CannotJudge):
    """The recipe file is missing, lacks a required name, or its train() does not hand back the doctor."""


def load(path: str | Path) -> ModuleType:
    """The recipe file as a module; RecipeError if there is none or it lacks a required name.

    Whatever the file's own code raises while it runs (SyntaxError, ImportError, ...) is raised unchanged.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise RecipeError(f"no recipe file at {path}")
    sys.path.insert(0, str(path.parent))  # a recipe may import helpers that sit beside it
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # DataLoader workers find the recipe's classes by module name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]  # a half-run recipe must not stand in for a fixed one loaded later
        raise
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise RecipeError(f"recipe {path.name} lacks {', '.join(missing)} (see `python -m doctor --help`)")
    return module


def definitions(path: str | Path) -> dict[str, str]:
    """Where the recipe file defines each of its top-level names: `buggy.py:31: return Net(head=nn.ReLU())`.

    A function or class whose body (after its docstring) is one statement is shown by that statement, where a
    change would go; a longer one by its `def` line and its range of lines; an assignment by its own line.
    """
    path = Path(path)
    try:
        source = path.read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return {}
    lines = source.splitlines()
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
            found[node.name] = body[0] if len(body) == 1 else node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    found[target.id] = node

    def shown(statement: ast.stmt) -> str:
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        span = f"{first}" if last == first else f"{first}-{last}"  # a statement over several lines: its range
        return f"{path.name}:{span}: {lines[first - 1].strip()}"

    return {name: shown(statement) for name, statement in found.items()}


def places(report: Report, path: str | Path, own_loop: bool = True) -> dict[str, list[str]]:
    """Per finding of `report`, the recipe's lines its next step is about (PARTS), as far as the file defines them.

    `own_loop=False` (the doctor's probe loop ran, not the recipe's train()) points no finding at train().
    """
    defined = definitions(path)
    found = {}
    for finding in report.findings:
        names = [n for n in PARTS.get(finding.verdict, ()) if n in defined and (own_loop or n != "train")]
        if names:
            found[finding.verdict] = [defined[n] for n in names]
    return found


def run(
    recipe: ModuleType,
    force_probe: bool = False,
    steps: int | None = None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    fit_steps: int | None = None,
) -> Report:
    """The recipe's own loop under the doctor if it has `train`, else the doctor's probe loop.

    `steps` is the probe loop's length (default: the recipe's STEPS, or 300); `max_steps` and `max_seconds` are
    the step and time budgets of whichever loop runs; `fit_steps` caps each of the doctor's fits of fresh models
    (None: the doctor's own lengths). The report points at the recipe's lines each finding is about
    (`Report.places`).
    """
    if steps is not None and hasattr(recipe, "train") and not force_probe:
        raise RecipeError(
            f"steps (--steps) is the probe loop's length, and {Path(getattr(recipe, '__file__', 'the recipe')).name}"
            " runs its own train(): cut its loop with max_steps (--max-steps N), or run the probe (--probe --steps N)"
        )
    checked = check_budgets(max_steps, max_seconds)
    budgets = {"max_steps": checked[0], "max_seconds": checked[1], **_fits_cut_to(fit_steps)}
    report = _run(recipe, force_probe, _probe_steps(recipe, steps), budgets)
    path = getattr(recipe, "__file__", None)
    if path:
        found = places(report, path, own_loop=hasattr(recipe, "train") and not force_probe)
        report = dataclasses.replace(report, places=found)
    return report


def _fits_cut_to(fit_steps: int | None) -> dict:
    """The Doctor's keywords that cap its fits of fresh models at `fit_steps` each (none where None)."""
    if fit_steps is None:
        return {}
    checked_limit(fit_steps, "fit_steps", whole=True)
    return {"memorize_steps": min(MEMORIZE_STEPS, fit_steps), "capacity_steps": min(CAPACITY_STEPS, fit_steps)}


def _probe_steps(recipe: ModuleType, steps: int | None) -> int:
    """The probe loop's length: `steps`, else the recipe's STEPS, else 300 (ValueError or RecipeError if not > 0)."""
    if steps is not None:
        return checked_limit(steps, "steps", whole=True)
    try:
        return checked_limit(getattr(recipe, "STEPS", 300), "STEPS", whole=True)
    except ValueError as error:
        raise RecipeError(f"the recipe's {error}: set STEPS to the probe loop's length, e.g. STEPS = 300") from None


class _Recorded(functools.partial):
    """Doctor with the recipe's keywords, as train(Doctor) gets it, keeping each doctor it builds.

    A functools.partial, so that its `keywords` (validation=, model_factory=, inputs=, ...) are there for a recipe
    that hands them to a framework's callback instead of building the Doctor itself.
    """

    def __call__(self, /, *args, **kwargs) -> Doctor:
        doctor = super().__call__(*args, **kwargs)
        self.__dict__.setdefault("doctors", []).append(doctor)
        return doctor

    @property
    def doctors(self) -> list[Doctor]:
        return self.__dict__.get("doctors", [])


def _run(recipe: ModuleType, force_probe: bool, steps: int, budgets: dict) -> Report:
    validation = getattr(recipe, "validation", None)
    layout = {name.lower(): getattr(recipe, name) for name in ("INPUTS", "TARGETS", "OUTPUT") if hasattr(recipe, name)}
    if hasattr(recipe, "train") and not force_probe:
        given = {"validation": validation() if validation else None, "model_factory": recipe.model, **layout, **budgets}
        built = _Recorded(Doctor, **given)  # a Ctrl-C in train()'s loop still reports the steps so far
        try:
            doctor = recipe.train(built)
        except KeyboardInterrupt:
            doctor = stopped_by_user(built.doctors[-1] if built.doctors else None)
        if not isinstance(doctor, Doctor):
            raise RecipeError(
                f"the recipe's train(Doctor) returned {'None' if doctor is None else type(doctor).__name__}, not the"
                " doctor it built: end it with `return doctor`"
            )
        return final_report(doctor)
    return probe(
        recipe.model,
        recipe.batches,
        recipe.loss,
        recipe.optimizer,
        steps=steps,
        validation=validation() if validation else None,
        **layout,
        **budgets,
    )
