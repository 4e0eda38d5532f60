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
"""

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from doctor.core import CannotJudge, Doctor, Report, probe

REQUIRED = ("model", "batches", "loss", "optimizer")


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


def run(recipe: ModuleType, force_probe: bool = False, steps: int | None = None) -> Report:
    """The recipe's own loop under the doctor if it has `train`, else the doctor's probe loop."""
    validation = getattr(recipe, "validation", None)
    layout = {name.lower(): getattr(recipe, name) for name in ("INPUTS", "TARGETS", "OUTPUT") if hasattr(recipe, name)}
    if hasattr(recipe, "train") and not force_probe:
        doctor = recipe.train(
            functools.partial(
                Doctor, validation=validation() if validation else None, model_factory=recipe.model, **layout
            )
        )
        if not isinstance(doctor, Doctor):
            raise RecipeError(
                f"the recipe's train(Doctor) returned {'None' if doctor is None else type(doctor).__name__}, not the"
                " doctor it built: end it with `return doctor`"
            )
        return doctor.report()
    return probe(
        recipe.model,
        recipe.batches,
        recipe.loss,
        recipe.optimizer,
        steps=steps or getattr(recipe, "STEPS", 300),
        validation=validation() if validation else None,
        **layout,
    )
