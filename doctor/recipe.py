"""Recipe files: a user's training run described in plain Python, for the command line.

A recipe file defines
    model()              -> a fresh nn.Module                        (required)
    batches()            -> an iterable of (inputs, targets), e.g. a DataLoader: one epoch  (required)
    loss                 -> the loss function, e.g. nn.CrossEntropyLoss()          (required)
    optimizer(params)    -> a torch.optim optimizer                   (required)
    validation()         -> an iterable of (inputs, targets)          (optional: validation accuracy)
    STEPS                -> steps of the doctor's own probe loop, default 300       (optional)
    train(Doctor)        -> runs the user's own loop with the doctor's three lines and returns the doctor
                            (optional: without it the doctor runs its probe loop on the pieces above)
"""

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from doctor.core import Doctor, Report, probe

REQUIRED = ("model", "batches", "loss", "optimizer")


def load(path: str | Path) -> ModuleType:
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no recipe file at {path}")
    sys.path.insert(0, str(path.parent))  # a recipe may import helpers that sit beside it
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # DataLoader workers find the recipe's classes by module name
    spec.loader.exec_module(module)
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise AttributeError(f"recipe {path.name} lacks {', '.join(missing)} (see `python -m doctor --help`)")
    return module


def run(recipe: ModuleType, force_probe: bool = False, steps: int | None = None) -> Report:
    """The recipe's own loop under the doctor if it has `train`, else the doctor's probe loop."""
    validation = getattr(recipe, "validation", None)
    if hasattr(recipe, "train") and not force_probe:
        doctor = recipe.train(
            functools.partial(Doctor, validation=validation() if validation else None, model_factory=recipe.model)
        )
        return doctor.report()
    return probe(
        recipe.model,
        recipe.batches,
        recipe.loss,
        recipe.optimizer,
        steps=steps or getattr(recipe, "STEPS", 300),
        validation=validation() if validation else None,
    )
