"""Command line of the analysis: `fit` writes the fitted thresholds, `report` scores and writes the report.

`python -m analysis fit RUNS`, `python -m analysis report RUNS` (RUNS defaults to runs/default).
"""

import argparse
import sys
from pathlib import Path

from analysis.fit import write_thresholds
from analysis.load import NoRecords, load_records
from analysis.rules import THRESHOLDS_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("command", choices=["fit", "report"])
    parser.add_argument("records", nargs="?", default="runs/default", help="records folder (default: runs/default)")
    parser.add_argument("--out", default="reports", help="report folder (default: reports)")
    parser.add_argument("--thresholds", default=str(THRESHOLDS_FILE), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        records = load_records(args.records)
    except (NoRecords, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command == "fit":
        thresholds = write_thresholds(records, Path(args.thresholds))
        for verdict, value in thresholds.items():
            print(f"{verdict:16s} {value:.6g}")
        print(f"thresholds: {args.thresholds}")
        return 0
    from analysis.report import build  # matplotlib only when a report is asked for

    text, _ = build(records, Path(args.out))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
