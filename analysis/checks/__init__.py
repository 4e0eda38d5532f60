"""The checks, one object each, defined in one module per family; everything else about them is derived here.

A family module (loop.py, parameters.py, schedule.py, outputs.py, initialization.py, data.py, capacity.py, ...)
defines its checks (analysis/checks/base.py: `Check`; evidence.py: the named values their sentences show) and
lists them in a module-level `CHECKS` tuple. Every other module of this package is read, so a new family is a new
file and nothing else. From the checks come:

- `CHECKS`: all of them in their order;
- `FITTED`: those whose threshold `make fit` fits (analysis/rules.py's `RULES`, in the same order);
- `PARTS`: per verdict, the recipe names its next step is about (doctor/recipe.py points at their lines);
- `FAULT_TYPES_NAMED`: per verdict, the DeepFD fault types it names (the real-bug benchmark's mapping);
- `HARM`: per verdict, how the grid reads whether its planted fault hurt (analysis/harm.py).

The two verdicts that are not checks (no fault named, or the run fails and no check names why) have their
recipe parts here too. Orders must differ: two checks at one place raise at import, naming both.
"""

import importlib
import pkgutil

from analysis.checks.base import HEALTHY, UNEXPLAINED, Check, Harm

# No check names the cause: the next step (overfit one batch, compare with a reference) is about the loop, what it
# hands the loss, and what the optimizer was given.
UNEXPLAINED_PARTS = ("train", "loss", "optimizer")


SUPPORT = ("base", "evidence")  # the modules that define what a check is, not checks


def collect(paths=None, package: str = __name__) -> tuple[Check, ...]:
    """Every family module's CHECKS (the modules of `paths`, default this package's), in order.

    A clash of order or verdict raises, naming the two checks.
    """
    found: list[Check] = []
    for module in pkgutil.iter_modules(__path__ if paths is None else paths):
        if module.name not in SUPPORT:
            found += importlib.import_module(f"{package}.{module.name}").CHECKS
    by_order, by_verdict = {}, {}
    for check in found:
        for seen, key in ((by_order, check.order), (by_verdict, check.verdict)):
            if key in seen:
                raise ValueError(f"checks {seen[key].verdict} and {check.verdict} share {key!r}: each needs its own")
            seen[key] = check
    return tuple(sorted(found, key=lambda c: c.order))


CHECKS = collect()
FITTED = [check for check in CHECKS if check.fitted]
PARTS: dict[str, tuple[str, ...]] = {c.verdict: c.parts for c in CHECKS} | {UNEXPLAINED: UNEXPLAINED_PARTS, HEALTHY: ()}
FAULT_TYPES_NAMED: dict[str, tuple[str, ...]] = {c.verdict: c.fault_types for c in CHECKS} | {
    UNEXPLAINED: (),  # the run fails and no check names why: no fault type named
    HEALTHY: (),
}
HARM: dict[str, Harm] = {c.verdict: c.harm for c in CHECKS}

__all__ = ["CHECKS", "FAULT_TYPES_NAMED", "FITTED", "HARM", "PARTS", "Check", "Harm"]
