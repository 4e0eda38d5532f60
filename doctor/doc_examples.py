"""The example reports of docs/doctor.md: each run recorded once from its recipe, its text rendered by `make docs`.

A report typed into the docs by hand goes stale the day a threshold is refitted or the report's wording changes
(docs/doctor.md once showed "the rules call 0.67 starved" and, a page further, 0.69). Running the examples on
every `make docs` would take minutes, too long for its `--check`, which the fast tests run. So each shown run is
kept as what it measured:

- `python -m doctor.pages --record-examples [NAME ...]` runs examples/NAME.py under the doctor, each in a
  process of its own as `python -m doctor examples/NAME.py` does, and writes docs/examples/NAME.observed.json:
  the run's `Observed` (doctor/observed_io.py), the command, and when, at which commit and on what machine it
  ran. Before writing, it checks that the kept run renders to the very text the run printed.
- `make docs` renders each kept run's report, `diagnose(observed)` with the committed thresholds of its step
  budget and the recipe's lines as the command line points at them, into the blocks of a docs page marked
  `<!-- generated: doctor-reports NAME ... -->` and `<!-- end generated -->` (analysis/docs.py fills them with this
  module's renderer, handed in by doctor/pages.py).

So a refitted threshold or a changed report makes the block stale, and `python -m doctor.pages --check` fails
until `make docs` is run; the measurements change only when the examples are recorded again.

The checklist's device-study line is not part of a run: diagnosis reads it from the checkout's runs/devices.
The kept run holds the line its machine printed, and rendering uses it, so the text does not depend on which
machine renders it.
"""

import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from datetime import date
from pathlib import Path

from analysis.rules import load_thresholds
from doctor import machine, observed_io
from doctor.diagnosis import diagnose
from doctor.observed import Observed
from doctor.watch import Doctor

KIND = "doctor-reports"  # the generated blocks this module fills
ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "examples"
KEPT = ROOT / "docs" / "examples"
FORMAT = 1  # of a kept run's file


def _shown(path: Path) -> str:
    """A path as the docs show it: from the repository's root where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def kept_path(name: str, folder: Path | None = None) -> Path:
    """Where the kept run of the example NAME lies (folder: KEPT, read when called so that a test can move it)."""
    return (folder or KEPT) / f"{name}.observed.json"


@contextlib.contextmanager
def _device_study_line(line: str):
    """Diagnose with the device-study line the recording machine printed (see the module's docstring)."""
    printed = machine.device_study_line
    machine.device_study_line = lambda *_: line
    try:
        yield
    finally:
        machine.device_study_line = printed


def render(kept: Mapping, thresholds: Callable[[int], Mapping[str, float]] = load_thresholds) -> str:
    """The report text of one kept run: its verdict under `thresholds(steps)`, pointed at the recipe's lines."""
    from doctor.recipe import places  # the recipe runner imports the doctor: here only when rendering

    if kept.get("format") != FORMAT:
        raise ValueError(f"a kept run of format {kept.get('format')!r}; this doctor reads format {FORMAT}")
    recipe = ROOT / kept["recipe"]
    if not recipe.is_file():  # its lines are what the report points at: never rendered without them
        raise FileNotFoundError(f"the kept run of {kept['recipe']} has no recipe there any more: record it again")
    observed = observed_io.from_plain(kept["observed"])
    with _device_study_line(kept["device_study"]):
        report = diagnose(observed, thresholds(observed.steps))
    report = dataclasses.replace(report, places=places(report, recipe, own_loop=kept["own_loop"]))
    return str(report)


def _read(name: str, folder: Path | None) -> dict:
    path = kept_path(name, folder)
    if not path.exists():
        raise FileNotFoundError(
            f"no kept run {_shown(path)} for the example {name!r}: `python -m doctor.pages --record-examples {name}`"
            f" records it (examples/{name}.py)"
        )
    return json.loads(path.read_text())


def _provenance(kept: Mapping[str, dict]) -> str:
    """When, where and at which commit the shown runs were recorded: one clause per distinct recording."""
    by_recording: dict[tuple, list[str]] = {}
    for name, run in kept.items():
        recorded = run["recorded"]
        key = (recorded["commit"], recorded["date"], recorded["machine"])
        by_recording.setdefault(key, []).append(f"`{name}.py`")
    clauses = [
        f"{' and '.join(names) + ' ' if len(by_recording) > 1 else ''}at commit {commit} on {day}, on {where}"
        for (commit, day, where), names in by_recording.items()
    ]
    said = (
        "Recorded " + "; ".join(clauses) + " (`python -m doctor.pages --record-examples`); the verdicts and numbers"
        " below are rendered by `make docs` from those measurements with the thresholds committed now."
    )
    return textwrap.fill(said, width=120, break_on_hyphens=False, break_long_words=False)


def block(
    names: list[str], thresholds: Callable[[int], Mapping[str, float]] = load_thresholds, folder: Path | None = None
) -> str:
    """The text of a generated block showing the examples `names`: where they ran, then each command and report."""
    if not names:
        raise ValueError(f"a `{KIND}` block names no example: `<!-- generated: {KIND} healthy_cnn ... -->`")
    kept = {name: _read(name, folder) for name in names}
    shown = []
    for run in kept.values():
        shown += [f"$ {run['command']}", render(run, thresholds)]
    return _provenance(kept) + "\n\n```\n" + "\n".join(shown) + "\n```\n"


def _machine() -> str:
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"a {os.cpu_count()}-core {platform.machine()} CPU machine{load}"


def _commit() -> str:
    """The commit the example ran at, and whether the code differed from it (docs/ aside: recording rewrites it)."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return head.stdout.strip() + (" with uncommitted changes" if changed.stdout.strip() else "")


@contextlib.contextmanager
def _finished_runs():
    """Every Observed a Doctor finishes inside, in order (the recipe runner hands back the report, not the run).

    What the run measured is what Doctor.finish() returns; finish() is wrapped only while the example runs.
    """
    finished: list[Observed] = []
    finish = Doctor.finish

    def keeping(doctor: Doctor) -> Observed:
        observed = finish(doctor)
        if not any(observed is seen for seen in finished):  # report() calls finish() again: the same run
            finished.append(observed)
        return observed

    Doctor.finish = keeping
    try:
        yield finished
    finally:
        Doctor.finish = finish


def record_here(recipe: Path) -> tuple[dict, str]:
    """Run the recipe under the doctor in this process: the kept run, and the report the run gave.

    Before handing them back it checks that the kept run, read back from JSON, renders to that very report.
    """
    from doctor.recipe import load, run

    recipe, machine_now, started = Path(recipe).resolve(), _machine(), time.perf_counter()
    with _finished_runs() as finished:
        module = load(recipe)
        printed = str(run(module))
    if len(finished) != 1:
        raise RuntimeError(f"{_shown(recipe)} finished {len(finished)} doctors; an example shows one run")
    kept = {
        "format": FORMAT,
        "command": f"python -m doctor {_shown(recipe)}",
        "recipe": _shown(recipe),
        "own_loop": hasattr(module, "train"),
        "recorded": {
            "commit": _commit(),
            "date": date.today().isoformat(),
            "machine": machine_now,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "device_study": machine.device_study_line(),
        "observed": observed_io.to_plain(finished[0]),
    }
    rendered = render(json.loads(json.dumps(kept)))  # through JSON, as it will be read
    if rendered != printed:
        raise RuntimeError(f"{_shown(recipe)}: the kept run renders otherwise than the run printed:\n{rendered}")
    return kept, printed


def record(names: list[str], folder: Path | None = None, out=None) -> list[Path]:
    """Record each example examples/NAME.py in a fresh process, as `python -m doctor` runs it; the files written."""
    recipes = {name: RECIPES / f"{name}.py" for name in names}  # RECIPES read now: a test may move it
    missing = [_shown(recipe) for recipe in recipes.values() if not recipe.is_file()]
    if missing:
        raise FileNotFoundError(f"no example recipe {', '.join(missing)} to record (the examples: {_shown(RECIPES)})")
    written = []
    for name, recipe in recipes.items():
        path = kept_path(name, folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "doctor.doc_examples", str(recipe), str(path)]
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            raise RuntimeError(f"recording {_shown(recipe)} failed: its error is printed above")
        verdict = render(json.loads(path.read_text())).split("\n", 1)[0]
        print(f"recorded {_shown(path)}: {verdict}", file=out)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    """`python -m doctor.doc_examples RECIPE FILE`: record() runs this in a fresh process for each example."""
    recipe, path = argv
    kept, printed = record_here(Path(recipe))
    Path(path).write_text(json.dumps(kept, indent=1, allow_nan=True) + "\n")
    print(f"$ {kept['command']}\n{printed}", flush=True)  # the one recording shows the report as it ran
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
