"""The checks, one object each, defined in one module per family; everything else about them is derived here.

A family module (loop.py, parameters.py, schedule.py, outputs.py, initialization.py, data.py, capacity.py, ...)
defines its checks (analysis/checks/base.py: `Check`; evidence.py: the named values their sentences show) and
lists them in a module-level `CHECKS` tuple. Every other module of this package is read, so a new family is a new
file and nothing else; modules kept elsewhere are named in the DOCTOR_CHECKS environment variable. From the checks come:

- `CHECKS`: all of them in their order;
- `FITTED`: those whose threshold `make fit` fits (analysis/rules.py's `RULES`, in the same order);
- `PARTS`: per verdict, the recipe names its next step is about (doctor/recipe.py points at their lines);
- `FAULT_TYPES_NAMED`: per verdict, the DeepFD fault types it names (the real-bug benchmark's mapping);
- `HARM`: per verdict, how the grid reads whether its planted fault hurt (analysis/harm.py).

The two verdicts that are not checks (no fault named, or the run fails and no check names why) have their
recipe parts here too. Orders must differ: two checks at one place raise at import, naming both.
"""

import importlib
import os
import pkgutil

from analysis.checks.base import HEALTHY, UNEXPLAINED, Check, Harm

# No check names the cause: the next step (overfit one batch, compare with a reference) is about the loop, what it
# hands the loss, and what the optimizer was given.
UNEXPLAINED_PARTS = ("train", "loss", "optimizer")


SUPPORT = ("base", "evidence")  # the modules that define what a check is, not checks
# Check modules kept outside this package: importable module names, comma-separated (a user's own checks, kept
# out of the repository, or a test's throwaway one). They are read after the family modules, with the same refusals.
EXTRA_MODULES = "DOCTOR_CHECKS"


def collect(paths=None, package: str = __name__, extra: str | None = None) -> tuple[Check, ...]:
    """Every family module's CHECKS (the modules of `paths`, default this package's), in order.

    `extra`: more module names, comma-separated (None: the DOCTOR_CHECKS environment variable). A clash of order
    or verdict raises, naming the two checks; so does an extra module that cannot be imported or has no CHECKS.
    """
    names = [f"{package}.{m.name}" for m in pkgutil.iter_modules(__path__ if paths is None else paths)]
    extra = os.environ.get(EXTRA_MODULES, "") if extra is None else extra
    extras = [n.strip() for n in extra.split(",") if n.strip()]
    found: list[Check] = []
    for name in [n for n in names if n.rsplit(".", 1)[-1] not in SUPPORT] + extras:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            if name not in extras:
                raise
            raise ImportError(f"check module {name} ({EXTRA_MODULES}={extra!r}) cannot be imported: {error}") from error
        if not isinstance(getattr(module, "CHECKS", None), tuple):
            raise ValueError(f"check module {name} has no CHECKS tuple: list its checks as CHECKS = (...)")
        found += module.CHECKS
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
