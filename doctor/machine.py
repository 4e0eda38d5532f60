"""Is a bigger machine the answer? The study's checklist, each line with its measured number.

A bigger machine helps a run that learns, whose loader keeps up, whose accelerator (if any) is busy, and that
still runs out of memory after the cheaper fixes. Anything short of that names what to fix first: a bigger
machine would only reproduce the failure sooner, at a higher price.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from analysis.checks.evidence import METRIC_NAMES, loader_fixes
from analysis.features import features
from analysis.rules import HEALTHY, UNEXPLAINED
from harness.targets import CLASS_TASKS

if TYPE_CHECKING:
    from doctor.observed import Observed


@dataclass(frozen=True)
class Check:
    """One line of the checklist: what is checked, whether the run passes it, and the measured number behind it.

    `ok` is None where the check was not measured (no model factory, no accelerator): the detail says why. It is
    printed as [n/a] and is null in the JSON, never a pass.
    """

    check: str
    ok: bool | None
    detail: str

    @property
    def mark(self) -> str:
        """The report's box: [yes], [no ] or [n/a] (not measured)."""
        return "[n/a]" if self.ok is None else "[yes]" if self.ok else "[no ]"

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Checklist:
    """Is a bigger machine the answer? The checks in order, and the conclusion drawn from them.

    `helps` is True only where a bigger machine would: the run learns, no fault is named, it is fed, its
    accelerator (if any) is busy, and it still ran out of memory. A check not measured (`ok` None) neither passes
    nor fails: the conclusion rests on the measured ones and names those that were not.
    """

    checks: tuple[Check, ...]
    conclusion: str
    helps: bool

    def __iter__(self):
        return iter(self.checks)

    def to_dict(self) -> dict:
        """The checklist as JSON-ready values: the checks, the conclusion, and whether a bigger machine helps."""
        checks = [c.to_dict() for c in self.checks]
        return {"checks": checks, "conclusion": self.conclusion, "helps": self.helps}


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


def bigger_machine(observed: "Observed", verdict: str, starved_threshold: float) -> Checklist:
    """The checklist of one finished run (doctor.observed.Observed) whose verdict is `verdict`.

    `starved_threshold` is the rules' data-wait threshold (the loader check reads the same feature).
    """
    measured = observed.measurements
    checks = (
        _improves(measured, observed.val_start, observed.unvalidated),
        _memorizes(observed),
        _no_fault_named(verdict),
        _loader_keeps_up(measured, starved_threshold),
        _accelerator_busy(measured["data_wait_share"], observed.on_accelerator),
        _memory_runs_out(observed),
    )
    learns, memorizes, named, fed, busy, out_of_memory = (c.ok for c in checks)
    if learns is False or memorizes is False or not named:
        fix = verdict if verdict not in (HEALTHY, UNEXPLAINED) else "why it does not learn"
        conclusion = f"no: fix {fix} first; a bigger machine would reproduce the failure sooner, at a higher price"
    elif fed is False:
        conclusion = "no: the loader is the bottleneck; feed the model faster first"
    elif busy is False:
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
    # What a conclusion other than "no" could not rest on: a memorization or a loader not measured might have said
    # "no" first (an accelerator that is not there has nothing to say).
    unmeasured = [c.check for c in checks[:4] if c.ok is None]
    if unmeasured and not conclusion.startswith("no:"):
        conclusion += f" (not measured: {'; '.join(unmeasured)})"
    return Checklist(checks, conclusion, helps=all(c.ok is not False for c in checks))


def _memorizes(observed: "Observed") -> Check:
    """Whether a fresh model drove the loss on a few examples near 0 (not measured without a model factory)."""
    name = "it memorizes a few examples"
    measured = observed.measurements
    ln_c = measured["ln_classes"]  # the uninformed loss: ln C for classes, the targets' variance for regression
    task = measured.get("task")
    uninformed = "ln C" if task in CLASS_TASKS else "ln V" if task == "sequence" else "the uninformed loss"
    memorized, tried, on = measured["memorize_best_loss"], list(measured["memorize_losses"]), observed.memorized_on
    if not tried:
        return Check(name, None, f"not measured ({observed.unmemorized})")
    if math.isnan(memorized):
        # Memorization ran, and no rate reached a finite loss: that is a measurement, not a missing factory.
        losses = ", ".join(f"{loss:.3g}" for loss in tried)
        said = f"a fresh model reached no finite loss on {on} examples at any rate (losses {losses})"
        return Check(name, False, said)
    said = f"best loss {memorized:.3g} on {on} examples (below {0.1 * ln_c:.3g} = 0.1 x {uninformed} means it can)"
    return Check(name, memorized < 0.1 * ln_c, said)


def _improves(measured: Mapping, val_start: tuple[float, float] | None, unvalidated: str = "") -> Check:
    """Whether the run got better: validation score up 5 points, or else the training loss halved.

    `unvalidated`: why there is no validation score to read, said beside the training loss's fall.
    """
    name = "it learns"
    task = measured.get("task")
    nonfinite = measured["nonfinite_losses"]
    if nonfinite:
        # A model computing NaN has no accuracy to compare: argmax of NaN rows is class 0, not learning.
        return Check(name, False, f"{nonfinite} of {measured['steps']} training losses were NaN or inf")
    if val_start is not None and not math.isnan(measured["final_val_acc"]):
        metric = METRIC_NAMES.get(task, "accuracy")
        start, end = val_start[1], measured["final_val_acc"]
        shown = (f"{start:.2f}", f"{end:.2f}") if task == "regression" else (f"{start:.0%}", f"{end:.0%}")
        return Check(name, end > start + 0.05, f"validation {metric} {shown[0]} -> {shown[1]}")
    curve = measured["train_loss_curve"]
    tenth = max(1, len(curve) // 10)
    head, tail = sum(curve[:tenth]) / tenth, sum(curve[-tenth:]) / tenth
    said = (
        f"training loss {head:.3g} -> {tail:.3g} over the first and last tenth ({unvalidated or 'no validation score'})"
    )
    return Check(name, tail < 0.5 * head, said)


def _no_fault_named(verdict: str) -> Check:
    if verdict == HEALTHY:
        named = "the rules found none"
    elif verdict == UNEXPLAINED:
        named = "the run fails, and no check names why (not among the known causes)"
    else:
        named = f"the rules name {verdict}"
    return Check("no fault named", verdict == HEALTHY, named)


def _loader_keeps_up(measured: Mapping, limit: float) -> Check:
    """The data wait per second of compute against the rules' starved threshold, with the fixes for its loader if over.

    The doctor's wait leaves out the host's pauses (harness/instruments/data_wait.py), so the loop's own compute is
    there to compare with however busy the host: "not measured" is left for a loop that never ran a step.
    """
    share, wait = measured["data_wait_share"], features(measured)["data_wait_ratio"]
    if math.isnan(wait):
        return Check("the loader keeps up", None, "not measured (no time of the loop's own)")
    fed = not wait > limit
    detail = (
        f"waited {wait:.2g}s for data per second of compute, {share:.0%} of the loop (the rules call {limit:.2g}"
        " starved)"
    )
    return Check("the loader keeps up", fed, detail if fed else f"{detail}; try first: {loader_fixes(measured)}")


def _accelerator_busy(data_wait_share: float, on_accelerator: bool) -> Check:
    if not on_accelerator:
        return Check("the accelerator is busy", None, f"no accelerator: the run is on the CPU; {device_study_line()}")
    busy = 1.0 - data_wait_share
    detail = f"{busy:.0%} of the loop outside data waits (an upper bound on GPU busy time)"
    return Check("the accelerator is busy", busy > 0.8, detail)


def _memory_runs_out(observed: "Observed") -> Check:
    if observed.out_of_memory is not None:
        return Check("memory is what runs out", True, f"ran out of memory ({observed.out_of_memory})")
    return Check("memory is what runs out", False, f"did not run out ({observed.memory})")


def memory_line(device: torch.device) -> str:
    """The accelerator's peak allocation against its size ("peak 1.20 of 80.0 GiB"), or "CPU run"."""
    if device.type != "cuda":
        return "CPU run"
    peak, total = torch.cuda.max_memory_allocated(device), torch.cuda.get_device_properties(device).total_memory
    return f"peak {peak / 2**30:.2f} of {total / 2**30:.1f} GiB"
