"""Running doctor recipes as a benchmark: one recipe, one seed, one thread per run, cached and run in parallel.

Both program benchmarks (benchmarks/realbugs: real buggy programs and their fixes; benchmarks/working: working
programs re-created from public sources) run recipe files under the doctor the same way. A result is a small
dict (the verdict, the failing findings and their evidence, the warnings, or why there is no verdict), cached as
one JSON file per (recipe, seed) whose name carries a hash of the recipe's files and of the doctor's code and
thresholds, so a second run only runs what changed.
"""

import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Set (a number of steps), each of the doctor's fits of fresh models after a run takes at most that many steps
# (doctor/recipe.py: fit_steps). The tests' short runs set it with the epoch caps: they check that every program
# runs under the doctor, and the capacity fit of the CNN of benchmarks/working/examples_mnist.py alone took
# 400 s of CI's 40 minutes at its 100 full-batch steps on 1024 examples.
FIT_STEPS_CAP_VARIABLE = "BENCHMARK_FIT_STEPS_CAP"


def content_hash(files: Iterable[Path]) -> str:
    """A hash of `files` (a recipe's own files), the doctor's code and the thresholds.

    A cached result is reused only for the same recipe, data, doctor and rules.
    """
    digest = hashlib.sha256()
    code = [p for package in ("doctor", "harness", "analysis") for p in (ROOT / package).rglob("*.py")]
    paths = [*files, *code, ROOT / "analysis" / "thresholds.json"]
    for path in sorted({p for p in paths if p.is_file() and "__pycache__" not in p.parts}):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def run_recipe(recipe: Path, seed: int, **labels) -> dict:
    """One recipe under the doctor with one seed, in this process: its verdict and findings, or why there are none.

    The seed replaces whatever seed the original program fixed. Modules of the recipe's folder are dropped from
    sys.modules first, so that data generated at import time follows this seed (workers are reused). `labels`
    (e.g. subject and variant) are copied into the result.
    """
    import numpy as np
    import torch

    from doctor.recipe import load, run
    from doctor.refusals import CannotJudge

    folder = recipe.resolve().parent
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file and Path(file).resolve().parent == folder:
            del sys.modules[name]
    # A loky worker makes "loky" the default start method, whose processes a recipe's own DataLoader workers cannot
    # use ('Process' object has no attribute 'env'); the recipe gets the platform's default, as in a plain process.
    multiprocessing.set_start_method(multiprocessing.get_all_start_methods()[0], force=True)
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    started = time.perf_counter()
    result = {**labels, "seed": seed, "verdict": None, "findings": [], "error": None}
    try:
        cap = os.environ.get(FIT_STEPS_CAP_VARIABLE)
        report = run(load(recipe), fit_steps=int(cap) if cap else None)
        result["verdict"] = report.verdict
        result["findings"] = [f.verdict for f in report.failing]  # warnings name no diagnosis
        result["evidence"] = [f.evidence for f in report.failing]
        result["warnings"] = [f.verdict for f in report.warnings]
        if report.cost is not None:  # the loop's own time, the report's after it, its budget and the fits it cut
            cost = report.cost.to_dict()
            result["cost"] = {key: cost[key] for key in ("loop_s", "after_s", "after_budget_s", "after_cut")}
    except CannotJudge as refused:
        result["error"] = f"refused: {refused}"
    except Exception as error:  # noqa: BLE001 - a recipe's own failure is a result of the benchmark, not a crash
        result["error"] = f"{type(error).__name__}: {error}"[:500]
    result["seconds"] = time.perf_counter() - started
    return result


def run_cached(tasks: list[tuple[Path, int, dict, Path]], jobs: int, force: bool) -> list[dict]:
    """Each (recipe, seed, labels, cache file) task, read from its cache file or run; results in task order.

    Fresh results are written as they come (atomically: a reader never sees half a file), so an interrupted
    benchmark resumes where it stopped.
    """
    from joblib import Parallel, delayed

    results: dict[int, dict] = {}
    todo = []
    for index, (_, _, _, path) in enumerate(tasks):
        if path.exists() and not force:
            results[index] = json.loads(path.read_text())
        else:
            todo.append(index)
    if todo:
        print(f"running {len(todo)} recipes ({len(results)} cached) on {jobs} workers", file=sys.stderr)
        fresh = Parallel(n_jobs=jobs, return_as="generator")(
            delayed(run_recipe)(tasks[i][0], tasks[i][1], **tasks[i][2]) for i in todo
        )
        for index, result in zip(todo, fresh, strict=True):
            path = tasks[index][3]
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name("." + path.name)
            temp.write_text(json.dumps(result))
            temp.replace(path)
            results[index] = result
    return [results[i] for i in range(len(tasks))]


def counted(results: list[dict]) -> str:
    """The seeds' verdicts, counted: `lr_too_low x4, healthy x1` (errors shown by kind, warnings in brackets)."""
    counts: dict[str, int] = {}
    for r in results:
        key = r["verdict"] or (r["error"] or "error").split(":")[0]
        if r["verdict"] and len(r["findings"]) > 1:
            key += " (+" + ", ".join(r["findings"][1:]) + ")"
        if r.get("warnings"):
            key += " [warnings: " + ", ".join(r["warnings"]) + "]"
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def majority(flags: list[bool]) -> bool:
    return sum(flags) * 2 > len(flags)
