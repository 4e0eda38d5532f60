"""Command line of the analysis: one subcommand per study, each with its own records folder.

python -m analysis fit [runs/zoo]          fit the thresholds per step budget on digits and the zoo problems
python -m analysis report [runs/default]   score every method, write reports/report.md (with the zoo section)
python -m analysis zoo [runs/zoo]          false alarms and every fault size, leave-one-problem-out
python -m analysis early [runs/default]    the rules on the same runs cut to 50..600 steps
python -m analysis pairs [runs/pairs]      two faults at once: both, one or neither named
python -m analysis families [runs/families]  the rules on a CNN, a GRU and a transformer encoder
python -m analysis devices [runs/devices]  the device study, its crossover table last
python -m analysis forecast [runs/zoo]     the training-loss forecast scored against runs' own continuations
python -m analysis data-curve [runs/zoo]   would more data help: the data gain by run, overfitting checks compared
python -m analysis rules                   the rules, what each feature is normalized by, the thresholds
(the report also includes runs/realbugs/realbugs.md, written by `make realbugs`: python -m benchmarks.realbugs)
"""

import argparse
import sys
from pathlib import Path

from analysis.fit import NothingToFit
from analysis.load import NoRecords, load_records
from analysis.rules import THRESHOLDS_FILE

DEFAULT_RECORDS = {
    "fit": "runs/zoo",
    "report": "runs/default",
    "zoo": "runs/zoo",
    "early": "runs/default",
    "pairs": "runs/pairs",
    "families": "runs/families",
    "devices": "runs/devices",
    "forecast": "runs/zoo",
    "data-curve": "runs/zoo",
    "realbugs": "runs/realbugs",
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m analysis", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="command")
    for name, folder in DEFAULT_RECORDS.items():
        sub = commands.add_parser(name, help=f"records folder default: {folder}")
        sub.add_argument("records", nargs="?", default=folder, help=f"records folder (default: {folder})")
        if name == "fit":
            sub.add_argument("--thresholds", default=str(THRESHOLDS_FILE), help="where to write the thresholds")
        if name == "report":
            sub.add_argument("--out", default="reports", help="report folder (default: reports)")
        if name in ("pairs", "families"):  # they print only: --out is accepted so that older command lines still run
            sub.add_argument("--out", default="reports", help="ignored: this command writes no files")
        if name == "report":
            for study in ("zoo", "pairs", "families", "devices", "realbugs"):
                default = DEFAULT_RECORDS[study]
                sub.add_argument(f"--{study}", default=default, help=f"{study} records for the report ({default})")
    commands.add_parser("rules", help="print the rules table (docs/rules.md carries it)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "rules":
        from analysis.rules import rules_table

        print(rules_table())
        return 0
    try:
        records = load_records(args.records)
    except (NoRecords, ValueError) as error:  # no records, or duplicate cell ids
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        run(args, records)
    except NothingToFit as error:  # a slice with nothing this command can fit or score
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def run(args: argparse.Namespace, records) -> None:
    """The subcommand `args.command` on `records`: prints its tables and lines."""
    if args.command == "devices":
        from analysis.devices import study_table, summary

        print(summary(study_table(records)))
    elif args.command == "forecast":
        from analysis.forecast import printout

        print("\n".join(printout(records[records.status == "ok"])))
    elif args.command == "data-curve":
        from analysis.data_curve_study import printout as data_printout

        print("\n".join(data_printout(records)))
    elif args.command == "early":
        from analysis.early import accuracy_by_budget, lines

        summary = accuracy_by_budget(records)
        print(summary.to_string(index=False))
        print("\n".join(lines(summary)))
    elif args.command == "zoo":
        from analysis import zoo

        unfitted: dict[str, str] = {}
        table = zoo.leave_one_problem_out(records, kept=unfitted)
        print("\n".join(zoo.printout(table, records, unfitted)))
    elif args.command in ("pairs", "families"):
        from analysis import families, pairs

        study = pairs if args.command == "pairs" else families
        print("\n".join(study.printout(records, Path(args.records))))
    elif args.command == "fit":
        from analysis.fit import write_thresholds

        fits = write_thresholds(records, Path(args.thresholds))
        by_budget = fits.thresholds
        verdicts = list(next(iter(by_budget.values())))
        print(f"{'steps':16s} " + " ".join(f"{b:>9d}" for b in by_budget))
        for verdict in verdicts:
            print(f"{verdict:16s} " + " ".join(f"{by_budget[b][verdict]:9.3g}" for b in by_budget))
        for budget, reasons in fits.kept.items():
            for verdict, why in reasons.items():
                print(f"kept {verdict} steps={budget}: {why}")
        print(f"thresholds: {args.thresholds}")
    else:
        from analysis.report import build  # matplotlib only when a report is asked for

        text, _ = build(
            records,
            Path(args.out),
            devices=Path(args.devices),
            zoo=Path(args.zoo),
            pairs=Path(args.pairs),
            families=Path(args.families),
            realbugs=Path(args.realbugs),
        )
        print(text)


if __name__ == "__main__":
    sys.exit(main())
