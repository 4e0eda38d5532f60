"""`python -m benchmarks.working` (`make working`): how often the doctor calls a working program sick.

Every recipe in this folder is a working training program that nobody here designed, re-created from a public
source (its module-level SOURCE names the repository, path and commit; its docstring lists the design facts
kept and the data swapped in). Each runs its own loop (`train(Doctor)`) under the doctor over 3 seeds, one
thread each, in parallel. It prints each program's verdicts and findings, then the line for scripts:

    working called-healthy <c>/<n>   the program called healthy (warnings allowed), majority over the seeds
    working report-in-budget <c>/<n> runs whose report took at most a quarter of the loop's own time or 30 s,
                                     whichever is larger (issue 51's goal; the fits cut to keep it are named)

A program the doctor refuses or that crashes under it counts as not called healthy, and its reason is printed.
Where the swapped-in data is smaller than the original's, a recipe scales its epochs so that it takes about the
original's number of optimizer steps (the training the design gives each weight): the tutorial's 5 epochs on a
dataset 40 times smaller would be a program cut short, not the working one. Where that would take much more
than a minute on one CPU thread, the recipe takes fewer steps and its docstring says how many of how many.
These programs are for evaluation only: no threshold or rule is fitted or tuned on them (analysis/fit.py fits
on digits and generated problems only). Results are cached as in `make realbugs` (benchmarks/runner.py); the
output folder (default runs/working) also gets `working.md`, the table the report includes.
"""

import argparse
import ast
import os
import sys
from pathlib import Path

from benchmarks import runner
from benchmarks.runner import counted, majority
from harness.instruments.budget import REPORT_FLOOR_S, REPORT_SHARE

HERE = Path(__file__).resolve().parent
SHARED = ("common.py",)  # helpers beside the recipes, not programs


def programs() -> dict[str, str]:
    """Each program's name (its file's stem) and its SOURCE, in name order."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_") or path.name in SHARED:
            continue
        found[path.stem] = source_of(path)
    return found


def source_of(path: Path) -> str:
    """The recipe's SOURCE string, read without running the file; ValueError if it has none."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SOURCE" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path.name} has no SOURCE = '<repository> <path> @ <commit>' naming what it re-creates")


def run_all(names: list[str], seeds: int, out: Path, jobs: int, force: bool) -> list[dict]:
    tasks = []
    for name in names:
        recipe = HERE / f"{name}.py"
        digest = runner.content_hash([recipe, *(HERE / s for s in SHARED)])
        for seed in range(seeds):
            tasks.append((recipe, seed, {"program": name}, out / f"{name}-s{seed}-{digest}.json"))
    return runner.run_cached(tasks, jobs, force)


def summarize(names: list[str], results: list[dict]) -> list[dict]:
    summary = []
    for name in names:
        runs = sorted((r for r in results if r["program"] == name), key=lambda r: r["seed"])
        summary.append({"program": name, "runs": runs, "healthy": majority([r["verdict"] == "healthy" for r in runs])})
    return summary


def markdown(summary: list[dict], sources: dict[str, str], seeds: int) -> str:
    healthy = sum(s["healthy"] for s in summary)
    lines = [
        f"Working programs re-created from public sources (held out: nothing was fitted or tuned on them), {seeds}"
        " seeds each; called healthy when the majority of seeds get `healthy` (warnings allowed).",
        "",
        "| program | source | verdicts | called healthy |",
        "|---|---|---|---|",
    ]
    for s in summary:
        verdicts = counted(s["runs"]).replace("|", "/")
        lines.append(f"| {s['program']} | {sources[s['program']]} | {verdicts} | {'yes' if s['healthy'] else 'no'} |")
    lines += ["", f"working called-healthy {healthy}/{len(summary)}"]
    return "\n".join(lines) + "\n"


def report_time_line(results: list[dict]) -> str:
    """How many runs' reports kept to the goal's time: a quarter of the loop's own time or 30 s, whichever is larger.

    Judged against the goal's figures, not the run's own budget (which a user may set otherwise); each run over it,
    and each fit cut to keep within it, is printed above the line.
    """
    timed = [r for r in results if r.get("cost")]
    within = 0
    for r in timed:
        cost = r["cost"]
        allowed = max(REPORT_SHARE * cost["loop_s"], REPORT_FLOOR_S)
        within += cost["after_s"] <= allowed
        note = f"report {cost['after_s']:.1f} s after a {cost['loop_s']:.1f} s loop (goal {allowed:.0f} s)"
        cut = "; ".join(f"{fit} cut ({where})" for fit, where in cost["after_cut"].items())
        if cost["after_s"] > allowed or cut:
            print(f"  {r['program']} seed {r['seed']}: {note}{'; ' + cut if cut else ''}")
    return f"working report-in-budget {within}/{len(timed)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.working", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per program (default 3)")
    parser.add_argument("--programs", help="comma-separated programs to run (default: all)")
    parser.add_argument("--out", default="runs/working", help="results folder (default runs/working)")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="parallel workers")
    parser.add_argument("--force", action="store_true", help="run every program again, ignoring cached results")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        print(f"error: --seeds and --jobs must be at least 1 (got {args.seeds} and {args.jobs})", file=sys.stderr)
        return 2
    sources = programs()
    names = list(sources)
    if args.programs:
        wanted = args.programs.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"error: unknown program {', '.join(unknown)}: choose from {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    out = Path(args.out)
    results = run_all(names, args.seeds, out, args.jobs, args.force)
    summary = summarize(names, results)
    for s in summary:
        print(f"{s['program']}  ({sources[s['program']]})")
        print(f"  verdicts: {counted(s['runs'])}")
        for r in s["runs"]:
            if r["error"]:
                print(f"  seed {r['seed']}: {r['error']}")
            for verdict, evidence in zip(r["findings"], r.get("evidence", []), strict=False):
                print(f"  seed {r['seed']}: {verdict}: {evidence}")
    table = markdown(summary, sources, args.seeds)
    out.mkdir(parents=True, exist_ok=True)
    (out / "working.md").write_text(table)
    line = table.strip().splitlines()[-1]
    (out / "working.lines").write_text(line + "\n")
    print(line)
    print(report_time_line(results))
    seconds = [r["seconds"] for r in results]
    if seconds:
        print(f"{len(seconds)} runs, median {sorted(seconds)[len(seconds) // 2]:.1f} s, longest {max(seconds):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
