"""Command line: `python -m doctor RECIPE.py` runs a recipe under the doctor and prints its report.

Options: --json FILE writes the report machine-readable; --probe runs the doctor's own loop even when the recipe
has a train(Doctor) loop; --steps N sets the probe's length. Exit status: 0 healthy, 1 a fault named, 2 refused.
"""

import argparse
import json
import sys

from doctor.core import UnsupportedTask
from doctor.recipe import __doc__ as RECIPE_HELP
from doctor.recipe import load, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m doctor",
        description=__doc__,
        epilog=RECIPE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", help="a recipe file (see below)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for standard output)")
    parser.add_argument("--probe", action="store_true", help="run the doctor's probe loop, not the recipe's train()")
    parser.add_argument("--steps", type=int, help="steps of the probe loop (default: the recipe's STEPS, or 300)")
    args = parser.parse_args(argv)
    try:
        report = run(load(args.recipe), force_probe=args.probe, steps=args.steps)
    except (UnsupportedTask, FileNotFoundError, AttributeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report)
        if args.json:
            with open(args.json, "w") as sink:
                json.dump(report.to_dict(), sink, indent=2)
    return 0 if report.verdict == "healthy" else 1


if __name__ == "__main__":
    sys.exit(main())
