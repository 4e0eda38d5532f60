"""Is a bigger machine the answer? The study's checklist, each line with its measured number.

A bigger machine helps a run that learns, whose loader keeps up, whose accelerator (if any) is busy, and that
still runs out of memory after the cheaper fixes. Anything short of that names what to fix first: a bigger
machine would only reproduce the failure sooner, at a higher price.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from analysis.features import features
from analysis.rules import HEALTHY, UNEXPLAINED, Finding
from harness.targets import CLASS_TASKS

LOADER_FIXES = (
    "DataLoader(num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=4), or decode and "
    "augment once and cache (PyTorch performance tuning guide)"
)


@dataclass(frozen=True)
class Check:
    check: str
    ok: bool
    detail: str


# The device study's records in this checkout (`make gpu-study` writes them): a path anchored at the package, so
# the line is the same from whatever folder the user's program runs in.
ROOT = Path(__file__).resolve().parent.parent
DEVICE_STUDY = ROOT / "runs" / "devices"


def device_study_line(folder: Path = DEVICE_STUDY) -> str:
    """What the device study measured about GPUs, where its records exist."""
    from analysis.devices import crossover, study_table
    from analysis.load import optional_records

    records = optional_records(folder)
    folder = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder  # runs/devices, not /home/...
    if records is None:
        return f"no device study in {folder} yet (`make gpu-study` measures when a GPU pays)"
    table = crossover(study_table(records))
    if table is None:
        return f"the device study in {folder} has no GPU figures yet"
    wins = [f"batch {b}: from width {row['GPU wins from width']}" for b, row in table.iterrows()]
    return f"the device study ({folder}) found the GPU faster on the digits MLP at " + "; ".join(wins)


def bigger_machine(
    measured: Mapping,
    findings: list[Finding],
    val_start,
    device: torch.device,
    error,
    starved_threshold: float,
    unmemorized: str = "no model factory given",
    memorized_on: int = 16,
) -> list[Check]:
    """The checklist; its last line is the conclusion. `starved_threshold` is the rules' data-wait threshold.

    `measured` is the run's measurements (the doctor's mapping, keyed like a grid record); `unmemorized` says why
    memorization was not measured, where it was not, and `memorized_on` on how many examples it was.
    """
    checks = []
    ln_c = measured["ln_classes"]  # the uninformed loss: ln C for classes, the targets' variance for regression
    task = measured.get("task")
    uninformed = "ln C" if task in CLASS_TASKS else "the uninformed loss"
    metric = {"regression": "R²", "multilabel": "per-label accuracy"}.get(task, "accuracy")
    memorized = measured["memorize_best_loss"]
    tried = list(measured["memorize_losses"])
    if not tried:
        memorizes, memo = True, f"not measured ({unmemorized})"
    elif math.isnan(memorized):
        # Memorization ran, and no rate reached a finite loss: that is a measurement, not a missing factory.
        losses = ", ".join(f"{loss:.3g}" for loss in tried)
        memorizes = False
        memo = f"a fresh model reached no finite loss on {memorized_on} examples at any rate (losses {losses})"
    else:
        memorizes = memorized < 0.1 * ln_c
        memo = (
            f"best loss {memorized:.3g} on {memorized_on} examples (below {0.1 * ln_c:.3g} = 0.1 x {uninformed}"
            " means it can)"
        )
    nonfinite = measured["nonfinite_losses"]
    if nonfinite:
        # A model computing NaN has no accuracy to compare: argmax of NaN rows is class 0, not learning.
        improves, progress = False, f"{nonfinite} of {measured['steps']} training losses were NaN or inf"
    elif val_start is not None and not math.isnan(measured["final_val_acc"]):
        improves = measured["final_val_acc"] > val_start[1] + 0.05
        start, end = val_start[1], measured["final_val_acc"]
        shown = (f"{start:.2f}", f"{end:.2f}") if task == "regression" else (f"{start:.0%}", f"{end:.0%}")
        progress = f"validation {metric} {shown[0]} -> {shown[1]}"
    else:
        curve = measured["train_loss_curve"]
        tenth = max(1, len(curve) // 10)
        head, tail = sum(curve[:tenth]) / tenth, sum(curve[-tenth:]) / tenth
        improves = tail < 0.5 * head
        progress = f"training loss {head:.3g} -> {tail:.3g} over the first and last tenth (no validation given)"
    checks.append(Check("it learns", memorizes and improves, f"{memo}; {progress}"))

    verdict = findings[0].verdict
    if verdict == HEALTHY:
        named = "the rules found none"
    elif verdict == UNEXPLAINED:
        named = "the run fails, and no check names why (not among the known causes)"
    else:
        named = f"the rules name {verdict}"
    checks.append(Check("no fault named", verdict == HEALTHY, named))

    share, limit = measured["data_wait_share"], starved_threshold
    wait = features(measured)["data_wait_ratio"]
    fed = not wait > limit
    detail = (
        f"waited {wait:.2g}s for data per second of compute, {share:.0%} of the loop (the rules call {limit:.2g}"
        " starved)"
    )
    checks.append(Check("the loader keeps up", fed, detail if fed else f"{detail}; try first: {LOADER_FIXES}"))

    if device.type == "cuda":
        busy = 1.0 - share
        checks.append(
            Check(
                "the accelerator is busy",
                busy > 0.8,
                f"{busy:.0%} of the loop outside data waits (an upper bound on GPU busy time)",
            )
        )
    else:
        checks.append(
            Check("the accelerator is busy", True, f"no accelerator: the run is on the CPU; {device_study_line()}")
        )

    out_of_memory = isinstance(error, torch.OutOfMemoryError)
    if device.type == "cuda":
        peak, total = torch.cuda.max_memory_allocated(device), torch.cuda.get_device_properties(device).total_memory
        memory = f"peak {peak / 2**30:.2f} of {total / 2**30:.1f} GiB"
    else:
        memory = "CPU run"
    ran_out = f"ran out of memory ({error})" if out_of_memory else f"did not run out ({memory})"
    checks.append(Check("memory is what runs out", out_of_memory, ran_out))

    if not checks[0].ok or not checks[1].ok:
        fix = verdict if verdict not in (HEALTHY, UNEXPLAINED) else "why it does not learn"
        conclusion = f"no: fix {fix} first; a bigger machine would reproduce the failure sooner, at a higher price"
    elif not fed:
        conclusion = "no: the loader is the bottleneck; feed the model faster first"
    elif not checks[3].ok:
        conclusion = "no: the accelerator waits; find what it waits for before buying a bigger one"
    elif out_of_memory:
        conclusion = (
            "it may help: the run learns and is fed, but ran out of memory; first try a smaller batch, mixed "
            "precision and activation checkpointing"
        )
    else:
        conclusion = (
            "not needed: the run learns, is fed, and fits in memory; a bigger machine would only make it faster"
        )
    checks.append(Check("conclusion", checks[-1].ok and all(c.ok for c in checks[:4]), conclusion))
    return checks
