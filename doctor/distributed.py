"""The doctor on several processes (DDP under torchrun): every rank's evidence, gathered once, judged together.

Each rank runs the same three lines with its own Doctor. While training, each rank measures its own loop
(harness/instruments/ranks.py: its batches' fingerprints, its replica's checksums, its own and the stepped
gradient's norms) and runs no collective: the training step is the user's alone. At the report, `gather` runs
one `all_gather_object` of each rank's evidence (so `doctor.report()`, or `finish()`, must be called on every
rank, as any collective must), and `judge` compares them. Every rank gets the same findings across ranks (the
same gathered evidence, judged the same way) at the head of its report; the rest of each rank's report is its
own steps, judged by the fitted rules. Print rank 0's.

The findings are facts with principled thresholds, not fitted ones (none of them exists on one process, where
the rules were fitted):

- `no_distributed_sampler`: two ranks' batches are identical, batch for batch, at more than half the batches
  compared (ranks that share the data through a DistributedSampler see disjoint examples: never one identical
  batch). Every rank then computes the same gradient; the averaged step is one rank's, at W times the cost.
- `set_epoch_not_called`: a rank whose loader's sampler shuffles (a DistributedSampler with shuffle=True, or a
  RandomSampler) gave more than half of a pass's batches in the same place as the pass before (a reshuffle
  repeats a whole batch, in order, about never). A DistributedSampler draws its order from its seed and its
  epoch, which only set_epoch moves. One rank's evidence is enough for it.
- `replicas_out_of_sync`: a parameter or buffer whose checksums differ across ranks at a step both compared, by
  more than `REPLICA_TOLERANCE` of the sum of its magnitudes (replicas kept by DDP are equal to the bit; the
  tolerance only leaves room for two devices summing the same values in another order). The first one is named.
- `gradients_summed`: the gradient the optimizer stepped on was longer than the mean over ranks of each rank's
  own gradient norm, at the median of the steps compared, by more than `SUM_TOLERANCE`. The mean of the ranks'
  gradients is never longer than the mean of their lengths (the triangle inequality; what is measured of each
  rank bounds its length: the sum of its backward passes' lengths under accumulation, plus the length of what
  `.grad` held before them in a loop that does not zero it), so an averaged gradient is at most 1x; a sum of W
  gradients pointing roughly the same way is up to Wx (sqrt(W)x for unrelated ones): under SGD the rate acts up
  to W times the one set (an optimizer that divides by the gradient's size, as Adam does, undoes most of it).
  Clipping between the reduction and the step can only shorten the stepped gradient, so it hides a sum rather
  than invent one; a loop that adds to `.grad` after backward (weight decay by hand) lengthens it. A GradScaler's
  scale is divided out of the local norms, as the optimizer steps on unscaled gradients.

A rank whose doctor gave up during training (a batch it cannot read there) still meets the others' gather at
the end of training when a framework's callback ran it (doctor/integrations: it brings `absent`); the checks
across ranks then read the other ranks only, and the report says which rank is missing and why.

A process group destroyed before the report (or a run whose Doctor was built outside one) is judged on this
rank's own evidence: only `set_epoch_not_called` can be, and the report says the others were not.
"""

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from analysis.checks.base import Finding
from doctor.machine import Check
from harness.instruments.ranks import shuffles, world

SAME_SHARE = 0.5  # of the batches compared: more than this identical across ranks, or repeated across passes
REPLICA_TOLERANCE = 1e-6  # of a tensor's sum of magnitudes: a difference past it is not rounding
SUM_TOLERANCE = 0.01  # past 1x: the stepped gradient longer than any average of the ranks' gradients can be


def unwrapped(model: nn.Module) -> nn.Module:
    """The module a DistributedDataParallel wrapper trains (the model itself otherwise).

    The doctor hooks and runs its own forward passes on it: through the wrapper, each of them would broadcast
    the buffers to the other ranks, a collective they would have to match. Hooks on the module still see every
    training forward the wrapper runs.
    """
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return model.module
    return model


def gather(evidence: dict) -> dict:
    """Every rank's evidence (one all_gather_object, on every rank), with this rank's number and the world's size.

    Where the process group is gone (destroyed before the report), this rank's evidence alone, said so.
    """
    now = world()
    if now is None or now[1] != evidence["world_size"]:
        return {
            "rank": evidence["rank"],
            "world_size": evidence["world_size"],
            "gathered": False,
            "evidence": [evidence],
        }
    everyone: list = [None] * now[1]
    torch.distributed.all_gather_object(everyone, evidence)
    return {"rank": now[0], "world_size": now[1], "gathered": True, "evidence": everyone}


def absent(rank: int, world_size: int, why: str) -> dict:
    """What a rank whose doctor gave up during training (a CannotJudge) brings to the report's gather instead.

    The other ranks' doctors wait in the gather at their report: a rank that brought nothing would leave them
    waiting until the process group's timeout. They judge without it, and say so (judge).
    """
    return {"rank": rank, "world_size": world_size, "gave_up": why}


# One check across the ranks, as the report lists it: passed (True), failed (False), not judged (None); the same
# shape as a line of the bigger-machine checklist.
RankLine = Check


@dataclass(frozen=True)
class Ranks:
    """What the report says of the ranks: the findings (failing, at the head of the report) and one line per check."""

    rank: int
    world_size: int
    gathered: bool
    lines: tuple[RankLine, ...]
    findings: tuple[Finding, ...]

    def heading(self) -> str:
        whose = "every rank's evidence, gathered at the report" if self.gathered else "this rank's evidence only"
        return f"across the {self.world_size} ranks (this is rank {self.rank}; {whose}):"

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "gathered": self.gathered,
            "checks": [line.to_dict() for line in self.lines],
        }


def _finding(verdict: str, feature: str, value: float, threshold: float, evidence: str, next_step: str) -> Finding:
    """A failing fact across ranks: judged against its principled threshold, firing above it (no fitted margin)."""
    return Finding(
        verdict, evidence, next_step, math.nan, feature=feature, value=float(value), threshold=threshold, above=True
    )


def _same(a, b) -> bool:
    return list(a) == list(b)


def _same_batches(evidence: list[Mapping]) -> tuple[RankLine, Finding | None]:
    check = "each rank trained on batches of its own"
    if len(evidence) < 2:
        return RankLine(check, None, "not judged: one rank's evidence only"), None
    compared = same = 0
    pair = None
    passes = min(len(e["passes"]) for e in evidence)
    for p in range(passes):
        prints = [e["passes"][p]["prints"] for e in evidence]
        for i in range(min(len(x) for x in prints)):
            compared += 1
            twins = [
                (a, b)
                for a in range(len(prints))
                for b in range(a + 1, len(prints))
                if _same(prints[a][i], prints[b][i])
            ]
            if twins:
                same += 1
                pair = pair or twins[0]
    if not compared:
        return RankLine(check, None, "not judged: no batch seen on every rank"), None
    share = same / compared
    detail = f"{same} of {compared} batches identical across ranks, batch for batch (at most {SAME_SHARE:.0%})"
    if share <= SAME_SHARE:
        return RankLine(check, True, detail), None
    sampler = evidence[pair[0]]["passes"][0]["sampler"] or "not a DataLoader's: unseen"
    finding = _finding(
        "no_distributed_sampler",
        "ranks_same_batches",
        share,
        SAME_SHARE,
        f"ranks {pair[0]} and {pair[1]} trained on identical batches at {same} of the {compared} batches compared,"
        f" batch for batch (the loader's sampler: {sampler}): every rank computes the same gradient, so the"
        f" averaged step is one rank's at {len(evidence)} times the cost",
        "give the DataLoader a DistributedSampler(dataset) (it shuffles: not shuffle=True on the loader too), so that"
        " each rank trains on its own share, and call sampler.set_epoch(epoch) before each epoch",
    )
    return RankLine(check, False, detail), finding


def _epoch_order(evidence: list[Mapping]) -> tuple[RankLine, Finding | None]:
    check = "a shuffling sampler drew a new order each epoch"
    worst = None  # (share, rank, pass, same, compared, sampler)
    for e in evidence:
        for p in range(1, len(e["passes"])):
            before, now = e["passes"][p - 1], e["passes"][p]
            if not (shuffles(before["sampler"]) and shuffles(now["sampler"])):
                continue
            n = min(len(before["prints"]), len(now["prints"]))
            if not n:
                continue
            same = sum(_same(before["prints"][i], now["prints"][i]) for i in range(n))
            if worst is None or same / n > worst[0]:
                worst = (same / n, e["rank"], p, same, n, now["sampler"])
    if worst is None:
        why = "no rank saw two passes over a loader whose sampler shuffles"
        return RankLine(check, None, f"not judged: {why}"), None
    share, rank, p, same, n, sampler = worst
    detail = f"at most {same} of {n} batches in the same place as in the pass before (at most {SAME_SHARE:.0%})"
    if share <= SAME_SHARE:
        return RankLine(check, True, detail), None
    finding = _finding(
        "set_epoch_not_called",
        "epoch_same_order",
        share,
        SAME_SHARE,
        f"rank {rank}'s {sampler} gave {same} of the first {n} batches of pass {p + 1} over the loader in the same"
        f" place as in pass {p}: the sampler shuffles, yet every epoch repeats the first one's order",
        "call loader.sampler.set_epoch(epoch) at the start of each epoch, before iterating the loader (a"
        " DistributedSampler draws its order from its seed and its epoch); a loader built anew each epoch with the"
        " same seeded generator repeats its order too",
    )
    return RankLine(check, False, detail), finding


def _replicas(evidence: list[Mapping]) -> tuple[RankLine, Finding | None]:
    check = "the replicas' parameters and buffers stayed equal"
    if len(evidence) < 2:
        return RankLine(check, None, "not judged: one rank's evidence only"), None
    steps = sorted(set.intersection(*(set(e["checksums"]) for e in evidence)), key=int)
    names = evidence[0]["names"]
    if not steps or any(e["names"] != names for e in evidence):
        why = "no step checked on every rank" if steps or not names else "the ranks' models differ in their tensors"
        return RankLine(check, None, f"not judged: {why}"), None
    differing: dict[str, tuple] = {}  # name -> (first step, rank, its sum, rank 0's sum)
    for step in steps:
        base = evidence[0]["checksums"][step]
        for other in evidence[1:]:
            sums = other["checksums"][step]
            for name, a, b in zip(names, base, sums, strict=True):
                tolerance = REPLICA_TOLERANCE * max(a[1], b[1]) + 1e-30
                if name not in differing and any(abs(x - y) > tolerance for x, y in zip(a, b, strict=True)):
                    differing[name] = (int(step), other["rank"], b[0], a[0])
    detail = f"{len(differing)} of {len(names)} tensors differed across ranks, compared at {len(steps)} steps"
    if not differing:
        return RankLine(check, True, detail), None
    name, (step, rank, theirs, ours) = min(differing.items(), key=lambda item: (item[1][0], names.index(item[0])))
    finding = _finding(
        "replicas_out_of_sync",
        "ranks_differing_tensors",
        len(differing),
        0.0,
        f"{_when(step)}, {name} differs between rank 0 and rank {rank} (its sum {ours:.6g} against"
        f" {theirs:.6g}); {len(differing)} of {len(names)} parameters and buffers differed at some step of the"
        f" {len(steps)} compared: the ranks train different models",
        "wrap the model in DistributedDataParallel once, before training, and change its weights only through the"
        " training step (load a checkpoint on every rank before wrapping, or broadcast it from rank 0); keep"
        " broadcast_buffers=True, or use SyncBatchNorm, for buffers",
    )
    return RankLine(check, False, detail), finding


def _when(step: int) -> str:
    return "before the first optimizer step" if step == 0 else f"after {step} optimizer step{'s' * (step != 1)}"


def _gradients(evidence: list[Mapping]) -> tuple[RankLine, Finding | None]:
    check = "the ranks' gradients were averaged, not summed"
    if len(evidence) < 2:
        return RankLine(check, None, "not judged: one rank's evidence only"), None
    steps = sorted(set.intersection(*(set(e["gradients"]) for e in evidence)), key=int)
    ratios = []
    for step in steps:
        local = statistics.fmean(e["gradients"][step][0] for e in evidence)
        reduced = evidence[0]["gradients"][step][1]
        if math.isfinite(local) and math.isfinite(reduced) and local > 0:
            ratios.append(reduced / local)
    if not ratios:
        return RankLine(check, None, "not judged: no step whose gradients every rank measured"), None
    ratio = statistics.median(ratios)
    world_size = len(evidence)
    detail = (
        f"the stepped gradient was {ratio:.2f}x the ranks' mean own gradient norm (median of {len(ratios)} steps;"
        f" averaging gives at most 1x)"
    )
    if ratio <= 1 + SUM_TOLERANCE:
        return RankLine(check, True, detail), None
    finding = _finding(
        "gradients_summed",
        "reduced_to_local_gradient",
        ratio,
        1 + SUM_TOLERANCE,
        f"the gradient the optimizer stepped on was {ratio:.2f}x the mean of the {world_size} ranks' own gradient"
        f" norms (the median of {len(ratios)} steps); an average of their gradients is never longer than 1x: they"
        f" were summed, so the rate acts up to {world_size}x the one set under SGD (an optimizer that divides by the"
        " gradient's size, such as Adam, undoes most of it; the rate tuned on one process then means another thing)",
        f"average the gradients: divide them by the world size ({world_size}) after all_reduce, or let"
        " DistributedDataParallel reduce them (it averages)",
    )
    return RankLine(check, False, detail), finding


def judge(ranks: Mapping | None) -> Ranks | None:
    """The checks across ranks on the gathered evidence (Observed.ranks); None for a run on one process."""
    if ranks is None:
        return None
    everyone = sorted(ranks["evidence"], key=lambda e: e["rank"])
    evidence = [e for e in everyone if "gave_up" not in e]  # the ranks whose doctor watched to the end
    judged = [check(evidence) for check in (_same_batches, _epoch_order, _replicas, _gradients)]
    steps = [e["steps"] for e in evidence]
    lines = [line for line, _ in judged]
    for e in everyone:
        if "gave_up" in e:
            check = f"rank {e['rank']}'s doctor watched the run to its end"
            lines.append(RankLine(check, None, f"its evidence is left out: it gave up ({e['gave_up']})"))
    if len(set(steps)) > 1:
        lines.append(RankLine("every rank took the same number of optimizer steps", False, f"steps per rank: {steps}"))
    return Ranks(
        ranks["rank"],
        ranks["world_size"],
        ranks["gathered"],
        tuple(lines),
        tuple(finding for _, finding in judged if finding is not None),
    )
