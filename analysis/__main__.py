"""Command line of the analysis: `fit`, `report`, `devices`, `early`, `pairs` and `families` subcommands.

`python -m analysis fit RUNS` writes the fitted thresholds; `python -m analysis report RUNS` scores and writes
the report; `python -m analysis devices runs/devices` prints the device study with its crossover table last;
`python -m analysis early runs/early` scores the rules on runs cut to 50..600 steps; `pairs runs/pairs` says
how often both of two planted faults are named; `families runs/families` scores the rules on other models.
"""

import argparse
import sys
from pathlib import Path

from analysis.fit import write_thresholds
from analysis.load import NoRecords, load_records
from analysis.rules import THRESHOLDS_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("command", choices=["fit", "report", "devices", "early", "pairs", "families"])
    parser.add_argument("records", nargs="?", default="runs/default", help="records folder (default: runs/default)")
    parser.add_argument("--out", default="reports", help="report folder (default: reports)")
    parser.add_argument(
        "--devices", default="runs/devices", help="device study records for the report (default: runs/devices)"
    )
    parser.add_argument("--early", default="runs/early", help="short-run records for the report (default: runs/early)")
    parser.add_argument("--pairs", default="runs/pairs", help="two-fault records for the report (default: runs/pairs)")
    parser.add_argument(
        "--families", default="runs/families", help="other families' records for the report (default: runs/families)"
    )
    parser.add_argument("--thresholds", default=str(THRESHOLDS_FILE), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        records = load_records(args.records)
    except (NoRecords, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command == "devices":
        from analysis.devices import study_table, summary

        print(summary(study_table(records)))
        return 0
    if args.command == "early":
        from analysis.early import accuracy_by_budget, accuracy_lines

        summary = accuracy_by_budget(records)
        print(summary.to_string(index=False))
        print("\n".join(accuracy_lines(summary)))
        return 0
    if args.command in ("pairs", "families"):
        from analysis.report import families_section, pairs_section

        section = pairs_section if args.command == "pairs" else families_section
        text, lines = section(Path(args.records), Path(args.out), records)
        print("\n".join(line for line in text if not line.startswith("![")))
        print("\n".join(lines))
        return 0
    if args.command == "fit":
        thresholds = write_thresholds(records, Path(args.thresholds))
        for verdict, value in thresholds.items():
            print(f"{verdict:16s} {value:.6g}")
        print(f"thresholds: {args.thresholds}")
        return 0
    from analysis.report import build  # matplotlib only when a report is asked for

    text, _ = build(
        records, Path(args.out), Path(args.devices), Path(args.early), Path(args.pairs), Path(args.families)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
