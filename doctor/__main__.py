"""Command line: `python -m doctor RECIPE.py` runs a recipe under the doctor and prints its report.

Options: --json FILE writes the report machine-readable; --plot FILE writes a PNG figure of what the verdict rests
on (loss curve and spikes, gradient norms, update ratio and data wait against their thresholds); --probe runs the
doctor's own loop even when the recipe has a train(Doctor) loop; --steps N sets the probe's length (N > 0).
--max-steps N and --max-seconds S are a step budget and a time budget (wall-clock, from the first batch) for
whichever loop runs, the probe or the recipe's train(): the doctor yields no batch once either is spent, and the
report's first line says the run was cut there. The --json and --plot files' folders must exist: they are
checked before the run, so that no run is wasted. Ctrl-C during the run ends it with the report of the steps so
far ("interrupted (Ctrl-C) after N steps" on its first line), and the exit status is the verdict's.

Exit status:
  0  healthy: no rule fired
  1  a fault was named: the verdict (the report's first line) is not healthy; a NaN or inf training loss is
     the verdict nonfinite_loss
  2  the doctor cannot judge this run, said in one line `error: ...`: the recipe file is missing or lacks a
     required name, the doctor cannot find a batch's inputs and targets (say where with INPUTS and TARGETS)
     or the model's output tensor (OUTPUT), the targets fit no output (class indices, one-hot, binary,
     multi-label and regression targets are covered), a class label of the first batch lies outside the
     output's classes and the loss does not ignore it (its ignore_index), the model has no parameters, the
     doctor saw no batch; or an option cannot be used: --steps, --max-steps or --max-seconds not a number
     above 0, a --json or --plot file whose folder does not exist or cannot be written
  3  the recipe's own code raised an exception (a syntax error, an error in its model, loss or data code):
     its traceback is printed on standard error, from the recipe's own frames where there are any (a
     traceback through the doctor's frames alone is a bug in the doctor: please report it)
  130  Ctrl-C with nothing to report, said in one line `error: interrupted (Ctrl-C) ...`: while the doctor
     started (torch's import), before the first training step, or again while the doctor measured the end of
     the run
"""

import argparse
import json
import math
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

STARTING = "error: interrupted (Ctrl-C) while the doctor started: nothing to report"
try:  # torch and the doctor take a second or more to import: a Ctrl-C then is one line too, not a traceback
    from doctor.recipe import __doc__ as RECIPE_HELP
    from doctor.recipe import load, run
    from doctor.refusals import CannotJudge, Interrupted
except KeyboardInterrupt:
    print(STARTING, file=sys.stderr)
    sys.exit(130)

HEALTHY, FAULT, CANNOT_JUDGE, USER_ERROR, INTERRUPTED = 0, 1, 2, 3, 130  # 130: a shell's status after Ctrl-C

PROJECT = Path(__file__).resolve().parent.parent
_OURS = tuple(str(PROJECT / package) + os.sep for package in ("doctor", "harness", "analysis"))
_LIBRARIES = tuple(
    {str(Path(sysconfig.get_paths()[key]).resolve()) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def _is_users(filename: str) -> bool:
    """A frame in the user's own code: not the doctor's packages, the standard library or an installed package."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap> and the like
        return False
    path = str(Path(filename).resolve())
    return not path.startswith(_OURS) and not path.startswith(_LIBRARIES)


def _users_traceback(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame of the user's code.

    Else from the first frame outside the doctor's packages; else all of it (the doctor's frames are all there is).
    """
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for keep in (
        lambda t: _is_users(t.tb_frame.f_code.co_filename),
        lambda t: not str(Path(t.tb_frame.f_code.co_filename).resolve()).startswith(_OURS),
    ):
        start = next((t for t in frames if keep(t)), None)
        if start is not None:
            return start
    return frames[0] if frames else None


def report_users_error(error: BaseException) -> None:
    """The exception the recipe's own code raised, with its traceback, on standard error."""
    print("the recipe's own code raised an exception; the doctor judged nothing (exit status 3):", file=sys.stderr)
    tb = error.__traceback__
    # A syntax error is raised by the compiler, below the doctor's frames: its message names the file and line.
    start = None if isinstance(error, SyntaxError) else _users_traceback(tb)
    print("".join(traceback.format_exception(type(error), error, start)), end="", file=sys.stderr)


class OptionError(ValueError):
    """An option the doctor cannot use (exit status 2); the message says which, and why, in one line."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m doctor",
        description=__doc__,
        epilog=RECIPE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", help="a recipe file (see below)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for standard output)")
    parser.add_argument("--plot", metavar="FILE", help="also write a PNG figure of what the verdict rests on")
    parser.add_argument("--probe", action="store_true", help="run the doctor's probe loop, not the recipe's train()")
    # Read as text and checked here, so that a bad value is one line `error: ...` rather than argparse's usage.
    parser.add_argument("--steps", metavar="N", help="steps of the probe loop (default: the recipe's STEPS, or 300)")
    parser.add_argument("--max-steps", metavar="N", help="step budget: stop after N training steps")
    parser.add_argument("--max-seconds", metavar="S", help="time budget: stop after S seconds of the loop")
    return parser


def _number(text: str | None, option: str, whole: bool) -> int | float | None:
    """An option's value: a whole number (`whole`) or a number of seconds above 0; OptionError naming it if not."""
    if text is None:
        return None
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < math.inf:
        unit = "a whole number of training steps" if whole else "a number of seconds"
        default = " (leave it out for the recipe's STEPS, or 300)" if option == "--steps" else ""
        raise OptionError(f"{option} must be {unit} above 0, not {text!r}{default}")
    return value


def _writable(path: str | None, option: str) -> None:
    """OptionError unless `path` can be written: its folder exists and may be written in (checked before the run)."""
    if path is None or (option == "--json" and path == "-"):
        return
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise OptionError(f"{option} {path} is a folder: name a file in it (e.g. {target / 'report'})")
    existing = next((above for above in (folder, *folder.parents) if above.exists()), None)
    if existing is not None and not existing.is_dir():  # the path runs through a file
        raise OptionError(f"{option} {path}: {existing} is a file, not a folder; name a file in a folder")
    if not folder.is_dir():
        raise OptionError(f"{option} {path}: its folder {folder} does not exist; create it, or name another file")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise OptionError(f"{option} {path}: this user may not write there; name another file")


def _write(report, args: argparse.Namespace) -> None:
    """The report on standard output (or as JSON there), the JSON file and the figure, as the options ask."""
    if args.json == "-":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report)
        if args.json:
            with open(args.json, "w") as sink:
                json.dump(report.to_dict(), sink, indent=2)
    if args.plot:
        # The verdict stands whatever happens to the picture: a figure that cannot be written is said on standard
        # error (standard output may be the JSON) and the exit status stays the verdict's.
        try:
            report.plot(args.plot)
        except OSError as error:
            print(f"error: could not write the figure to {args.plot}: {error}", file=sys.stderr)
        else:
            print(f"figure written to {args.plot}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        steps = _number(args.steps, "--steps", whole=True)
        budgets = {
            "max_steps": _number(args.max_steps, "--max-steps", whole=True),
            "max_seconds": _number(args.max_seconds, "--max-seconds", whole=False),
        }
        _writable(args.json, "--json")
        _writable(args.plot, "--plot")
        report = run(load(args.recipe), force_probe=args.probe, steps=steps, **budgets)
    except (CannotJudge, OptionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return CANNOT_JUDGE
    except Interrupted as error:
        print(f"error: {error}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # while the recipe file itself ran, before any doctor was built
        print("error: interrupted (Ctrl-C) before the first training step: nothing to report", file=sys.stderr)
        return INTERRUPTED
    except Exception as error:  # noqa: BLE001 - anything else was raised by the recipe's code (or through it)
        report_users_error(error)
        return USER_ERROR
    _write(report, args)
    return HEALTHY if report.verdict == "healthy" else FAULT


if __name__ == "__main__":
    sys.exit(main())
