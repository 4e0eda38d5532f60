"""`python -m benchmarks.realbugs` (`make realbugs`): the doctor on real buggy programs and their fixes.

Every subject of subjects.csv (real Keras programs from Stack Overflow and GitHub, the benchmark the published
tools are scored on) is a folder here with `buggy.py` and `fixed.py`, two doctor recipes; a folder with a
NOT_PORTED.md instead is listed with its reason. Each recipe runs under the doctor with its own loop
(`train(Doctor)`) over 5 seeds, one thread each, in parallel. Per subject it prints the doctor's verdicts on
both programs and the ground truth, then the lines for scripts:

    realbugs detection <c>/<n>      buggy not healthy AND fixed healthy (each the majority over the seeds)
    realbugs buggy-flagged <c>/<n>  the buggy program gets a failing finding (the published tools' "detection")
    realbugs diagnosis <c>/<n>      a failing finding on the buggy program names a true fault type (majority over seeds)
    realbugs fixed-healthy <c>/<n>  the fixed program called healthy (majority over the seeds)

and a table of these beside each published tool's figures on the same subjects. A finding names fault types
through VERDICT_TYPES below (the papers' rule: at least one true type named counts as a diagnosis); every
failing finding of the report counts, not only the first, and no warning does (an oddity the run did not pay
for names no fault). A fixed program whose report has warnings only is called healthy. The figures on these
programs are held out: no threshold or rule was fitted or tuned on them (analysis/fit.py fits on digits and
generated problems only).

The TrainCheck set (traincheck/subjects.csv, `--set traincheck`): the silent errors of TrainCheck's evaluation
(OrderLab/TrainCheck-Evaluation-Workloads), re-created as buggy and fixed PyTorch recipes in traincheck/<subject>/
the same way (or a NOT_PORTED.md saying why not). They have no DeepFD fault types, so they are scored on
detection, buggy-flagged and fixed-healthy only (no diagnosis), out of every subject listed, after the lines above:

    realbugs traincheck detection <c>/<n>      buggy not healthy AND fixed healthy (each the majority over the seeds)
    realbugs traincheck buggy-flagged <c>/<n>  the buggy program gets a failing finding
    realbugs traincheck fixed-healthy <c>/<n>  the fixed program called healthy

`--set deepfd|traincheck|all` (default all) chooses the sets to run.

Results are cached per recipe, seed and content of the subject's files in the output folder (default
runs/realbugs), so a second run only runs what changed; `--force` runs everything again. The output folder
also gets `realbugs.md`, the table the report (`make report`) includes (with a section per set run).
"""

import argparse
import csv
import os
import re
import sys
from pathlib import Path

from analysis.checks import FAULT_TYPES_NAMED
from benchmarks import runner
from benchmarks.runner import counted, majority

HERE = Path(__file__).resolve().parent
SUBJECTS_FILE = HERE / "subjects.csv"
TRAINCHECK = HERE / "traincheck"  # the TrainCheck silent errors: traincheck/subjects.csv, a folder per subject
TRAINCHECK_FILE = TRAINCHECK / "subjects.csv"
SETS = ("deepfd", "traincheck")
VARIANTS = ("buggy", "fixed")
TOOLS = ("umlaut", "autotrainer", "deeplocalize", "deepfd", "default")
TOOL_NAMES = {
    "umlaut": "UMLAUT",
    "autotrainer": "AUTOTRAINER",
    "deeplocalize": "DeepLocalize",
    "deepfd": "DeepFD",
    "default": "DEFault",
}

# Which of DeepFD's fault types (subjects.csv, deepfd_labels) each verdict names: the part of the program its
# next step tells the user to change (each check's `fault_types`, analysis/checks/). Verdicts about the loop or the
# machine name none of them (Keras writes the loop itself: no forgotten zero_grad, no train/eval switch, no data
# loader in these programs).
VERDICT_TYPES = FAULT_TYPES_NAMED


# Buggy programs that train well in PyTorch, as DeepFD's sheet and the independent audit (dlfaults/HowRealAreThey)
# note. They are scored as the papers score them: a buggy program, flagged only if the doctor says it fails.
TRAINS_WELL = {"59278771": "its buggy program trains well", "34673164": "its buggy program trains well"}


def subjects() -> list[dict]:
    with SUBJECTS_FILE.open() as handle:
        return list(csv.DictReader(handle))


def traincheck_subjects() -> list[dict]:
    with TRAINCHECK_FILE.open() as handle:
        return list(csv.DictReader(handle))


def not_ported(subject: str, root: Path = HERE) -> str | None:
    """Why a subject was not ported (the first sentence of its NOT_PORTED.md after the source), or None if it was."""
    note = root / subject / "NOT_PORTED.md"
    if not note.exists():
        return None
    paragraphs = [" ".join(p.split()) for p in note.read_text().split("\n\n") if p.strip() and not p.startswith("#")]
    reasons = [p for p in paragraphs if not p.startswith("http")] or ["see NOT_PORTED.md"]
    first = reasons[0].lstrip("0123456789. ")
    return first.split(". ")[0].rstrip(".") + f" ({note.relative_to(HERE.parent.parent).as_posix()})"


def content_hash(folder: Path) -> str:
    """A hash of the subject's files, the Keras port's helpers, the doctor's code and the thresholds."""
    return runner.content_hash([*folder.rglob("*"), HERE / "kerasport.py"])


def traincheck_helpers(folder: Path) -> list[Path]:
    """The modules of traincheck/ that a subject's recipes import (common.py; ranks.py for the two-process ones)."""
    pattern = re.compile(r"benchmarks\.realbugs\.traincheck(?:\.(\w+)| import (\w+))")
    names = {n for path in folder.glob("*.py") for match in pattern.finditer(path.read_text()) for n in match.groups()}
    modules = [TRAINCHECK / f"{name}.py" for name in sorted(n for n in names if n)]
    return [module for module in modules if module.is_file()]


def traincheck_hash(folder: Path) -> str:
    """A hash of a TrainCheck subject's files, the helpers its recipes import, the doctor's code and thresholds."""
    helpers = [TRAINCHECK / "common.py", HERE.parent / "working" / "common.py", *traincheck_helpers(folder)]
    return runner.content_hash([*folder.rglob("*"), *helpers])


def run_one(subject: str, variant: str, seed: int, root: Path = HERE) -> dict:
    """One recipe of a subject under the doctor with one seed, in this process (benchmarks/runner.py)."""
    return runner.run_recipe(root / subject / f"{variant}.py", seed, subject=subject, variant=variant)


def tasks_for(names: list[str], seeds: int, out: Path, root: Path = HERE) -> list[tuple[Path, int, dict, Path]]:
    """The (recipe, seed, labels, cache file) of every subject, variant and seed; TrainCheck's caches are prefixed."""
    tasks = []
    for subject in names:
        digest = content_hash(root / subject) if root == HERE else traincheck_hash(root / subject)
        prefix = "" if root == HERE else "traincheck-"
        for variant in VARIANTS:
            for seed in range(seeds):
                cache = out / f"{prefix}{subject}-{variant}-s{seed}-{digest}.json"
                tasks.append((root / subject / f"{variant}.py", seed, {"subject": subject, "variant": variant}, cache))
    return tasks


def run_all(names: list[str], seeds: int, out: Path, jobs: int, force: bool) -> list[dict]:
    """Every (subject, variant, seed) of `names`, from the cache where its folder has not changed."""
    return runner.run_cached(tasks_for(names, seeds, out), jobs, force)


def types_named(findings: list[str]) -> set[str]:
    return {t for verdict in findings for t in VERDICT_TYPES.get(verdict, ())}


def _by_program(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """The results of each (subject, variant), in seed order."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for result in sorted(results, key=lambda r: r["seed"]):
        by_key.setdefault((result["subject"], result["variant"]), []).append(result)
    return by_key


def _judged(subject: str, by_key: dict[tuple[str, str], list[dict]]) -> dict:
    """A ported subject's runs of both programs, and whether the buggy one is flagged and the fixed one healthy."""
    buggy, fixed = by_key.get((subject, "buggy"), []), by_key.get((subject, "fixed"), [])
    flagged = majority([r["verdict"] is not None and r["verdict"] != "healthy" for r in buggy])
    fixed_healthy = majority([r["verdict"] == "healthy" for r in fixed])
    return {
        "buggy": buggy,
        "fixed": fixed,
        "flagged": flagged,
        "fixed_healthy": fixed_healthy,
        "detected": flagged and fixed_healthy,
    }


def summarize(rows: list[dict], results: list[dict]) -> list[dict]:
    """Per subject: the verdicts on both programs, and whether it counts as detected, diagnosed, fixed healthy."""
    by_key = _by_program(results)
    summary = []
    for row in rows:
        subject, truth = row["subject"], set(row["deepfd_labels"].split())
        reason = not_ported(subject)
        entry = {"subject": subject, "truth": sorted(truth), "not_ported": reason, "row": row}
        if reason is None:
            entry.update(_judged(subject, by_key))
            entry["refused"] = any(r["error"] for r in entry["buggy"] + entry["fixed"])
            entry["diagnosed"] = majority([bool(types_named(r["findings"]) & truth) for r in entry["buggy"]])
        summary.append(entry)
    return summary


def summarize_traincheck(rows: list[dict], results: list[dict]) -> list[dict]:
    """Per TrainCheck subject: the verdicts on both programs and whether it counts as detected (no diagnosis)."""
    by_key = _by_program(results)
    summary = []
    for row in rows:
        subject = row["subject"]
        entry = {"subject": subject, "row": row, "not_ported": not_ported(subject, TRAINCHECK), "detected": False}
        if entry["not_ported"] is None:
            entry.update(_judged(subject, by_key))
        summary.append(entry)
    return summary


def _counts(summary: list[dict], marks: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Per line name, the ported subjects with that mark, out of every subject listed (not ported: missed)."""
    ported = [s for s in summary if s["not_ported"] is None]
    return {name: (sum(s[mark] for s in ported), len(summary)) for name, mark in marks.items()}


def traincheck_figures(summary: list[dict]) -> dict[str, tuple[int, int]]:
    """TrainCheck subjects detected, flagged and fixed-healthy, out of every one listed (not ported: missed)."""
    return _counts(summary, {"detection": "detected", "buggy-flagged": "flagged", "fixed-healthy": "fixed_healthy"})


def traincheck_markdown(summary: list[dict], seeds: int) -> str:
    found = traincheck_figures(summary)
    lines = [
        "### TrainCheck's silent errors",
        "",
        f"The silent training errors of TrainCheck's evaluation re-created as PyTorch recipes (held out), {seeds} seeds"
        " each, majority over seeds. Detection: the buggy program not called healthy and the fixed one called"
        " healthy; a subject not ported counts as missed. The expected verdicts are a plain description of what the"
        " bug should reveal, not a score.",
        "",
        "| subject | bug | expected | buggy: verdicts | fixed: verdicts | detected |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary:
        row = s["row"]
        if s["not_ported"] is not None:
            lines.append(
                f"| {s['subject']} | {row['bug']} | {row['expected']} | not ported: {s['not_ported']} | | no |"
            )
            continue
        lines.append(
            f"| {s['subject']} | {row['bug']} | {row['expected']} | {counted(s['buggy'])} | {counted(s['fixed'])} |"
            f" {'yes' if s['detected'] else 'no'} |"
        )
    lines += ["", "TrainCheck " + ", ".join(f"{name} {c}/{n}" for name, (c, n) in found.items()) + "."]
    return "\n".join(lines) + "\n"


def figures(summary: list[dict]) -> dict[str, tuple[int, int]]:
    """The DeepFD lines: each out of every subject listed (a subject not ported counts as missed)."""
    marks = {"detection": "detected", "buggy-flagged": "flagged", "diagnosis": "diagnosed"}
    return _counts(summary, {**marks, "fixed-healthy": "fixed_healthy"})


def tool_figures(summary: list[dict]) -> dict[str, tuple[int, int, int]]:
    """Each published tool's (detections, diagnoses, subjects it was scored on) on these subjects."""
    result = {}
    for tool in TOOLS:
        scored = [s["row"] for s in summary if s["row"].get(f"{tool}_det", "") != ""]
        result[tool] = (
            sum(int(r[f"{tool}_det"]) for r in scored),
            sum(int(r[f"{tool}_diag"]) for r in scored),
            len(scored),
        )
    return result


def markdown(summary: list[dict], seeds: int) -> str:
    """The per-subject table and the comparison with the published tools, as the report includes them."""
    lines = [
        "Real buggy programs (held out: no threshold was fitted on them; docs/realbugs.md says which rules changed"
        f" after a first run on them), {seeds} seeds each, majority over seeds. Detection: the buggy program not called"
        " healthy and the fixed one called healthy. Diagnosis: a finding on the buggy program names one of its true"
        " fault types (benchmarks/realbugs/__main__.py, VERDICT_TYPES). A subject not ported counts as missed.",
        "",
        "| subject | true types | buggy: verdicts | fixed: verdicts | detected | diagnosed |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary:
        if s["not_ported"] is not None:
            lines.append(f"| {s['subject']} | {' '.join(s['truth'])} | not ported: {s['not_ported']} | | no | no |")
            continue
        name = f"{s['subject']} ({TRAINS_WELL[s['subject']]})" if s["subject"] in TRAINS_WELL else s["subject"]
        lines.append(
            f"| {name} | {' '.join(s['truth'])} | {counted(s['buggy'])} | {counted(s['fixed'])} |"
            f" {'yes' if s['detected'] else 'no'} | {'yes' if s['diagnosed'] else 'no'} |"
        )
    ours = figures(summary)
    tools = tool_figures(summary)

    def share(name: str) -> str:
        return f"{ours[name][0]}/{ours[name][1]}"

    lines += [
        "",
        "| tool | buggy flagged | diagnosis | fixed called healthy | detection (flagged and fixed healthy) |",
        "|---|---|---|---|---|",
        f"| the doctor (this repository) | {share('buggy-flagged')} | {share('diagnosis')} | {share('fixed-healthy')} |"
        f" {share('detection')} |",
    ]
    for tool, (det, diag, n) in tools.items():
        lines.append(f"| {TOOL_NAMES[tool]} (published) | {det}/{n} | {diag}/{n} | not reported | not reported |")
    trains_well = ", ".join(f"{subject} ({why})" for subject, why in TRAINS_WELL.items())
    lines += [
        "",
        "The published figures are each tool's own results on these subjects, from DeepFD's and DEFault's evaluation"
        ' sheets (benchmarks/realbugs/subjects.csv); their detection is "says something is wrong" on the buggy'
        " program alone: the buggy-flagged column. The detection column is stricter: it also requires the fixed"
        f" program to be called healthy. Scored as the papers score them although their buggy programs train well"
        f" in PyTorch: {trains_well}; flagging them counts, calling them healthy is a miss.",
    ]
    return "\n".join(lines) + "\n"


def _print_programs(s: dict) -> bool:
    """Print a subject's verdicts on both programs and their errors (or why it was not ported); False if not ported."""
    if s["not_ported"] is not None:
        print(f"  not ported: {s['not_ported']}")
        return False
    print(f"  buggy: {counted(s['buggy'])}")
    print(f"  fixed: {counted(s['fixed'])}")
    for r in s["buggy"] + s["fixed"]:
        if r["error"]:
            print(f"  {r['variant']} seed {r['seed']}: {r['error']}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realbugs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per recipe (default 5)")
    parser.add_argument("--subjects", help="comma-separated subjects to run (default: all of the sets' subjects)")
    parser.add_argument(
        "--set", choices=(*SETS, "all"), default="all", help="the subjects: DeepFD's, TrainCheck's, all"
    )
    parser.add_argument("--out", default="runs/realbugs", help="results folder (default runs/realbugs)")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="parallel workers")
    parser.add_argument("--force", action="store_true", help="run every recipe again, ignoring cached results")
    args = parser.parse_args(argv)
    rows = subjects() if args.set in ("deepfd", "all") else []
    tc_rows = traincheck_subjects() if args.set in ("traincheck", "all") else []
    if args.subjects:
        wanted = args.subjects.split(",")
        unknown = sorted(set(wanted) - {r["subject"] for r in rows + tc_rows})
        if unknown:
            valid = ", ".join(r["subject"] for r in rows + tc_rows)
            print(f"error: unknown subject {', '.join(unknown)}: choose from {valid}", file=sys.stderr)
            return 2
        rows = [r for r in rows if r["subject"] in wanted]
        tc_rows = [r for r in tc_rows if r["subject"] in wanted]
    out = Path(args.out)
    ported = [r["subject"] for r in rows if not_ported(r["subject"]) is None]
    tc_ported = [r["subject"] for r in tc_rows if not_ported(r["subject"], TRAINCHECK) is None]
    tasks = tasks_for(ported, args.seeds, out) + tasks_for(tc_ported, args.seeds, out, TRAINCHECK)
    results = runner.run_cached(tasks, args.jobs, args.force)  # both sets in one pool
    split = len(ported) * len(VARIANTS) * args.seeds
    summary, tc_summary = summarize(rows, results[:split]), summarize_traincheck(tc_rows, results[split:])
    for s in summary:
        print(f"{s['subject']}  (true: {' '.join(s['truth'])})")
        if _print_programs(s):
            marks = [("detected", s["detected"]), ("diagnosed", s["diagnosed"]), ("fixed healthy", s["fixed_healthy"])]
            print("  " + ", ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in marks))
    for s in tc_summary:
        print(f"traincheck {s['subject']}  (expected: {s['row']['expected']})")
        if _print_programs(s):
            marks = [("detected", s["detected"]), ("fixed healthy", s["fixed_healthy"])]
            print("  " + ", ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in marks))
    lines = []
    if rows:
        lines += [f"realbugs {name} {correct}/{total}" for name, (correct, total) in figures(summary).items()]
    if tc_rows:
        found = traincheck_figures(tc_summary)
        lines += [f"realbugs traincheck {name} {correct}/{total}" for name, (correct, total) in found.items()]
    print("\n".join(lines))
    tables = ([markdown(summary, args.seeds)] if rows else []) + (
        [traincheck_markdown(tc_summary, args.seeds)] if tc_rows else []
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "realbugs.md").write_text("\n".join(tables))
    (out / "realbugs.lines").write_text("\n".join(lines) + "\n")
    if rows:
        print()
        print(tables[0].split("\n\n")[-2])
    seconds = [r["seconds"] for r in results]
    if seconds:
        print(f"{len(seconds)} runs, median {sorted(seconds)[len(seconds) // 2]:.1f} s, longest {max(seconds):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
