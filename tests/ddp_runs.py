"""Two-process runs of the doctor for tests/test_doctor_distributed.py: the script torchrun starts on every rank.

    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT tests/ddp_runs.py OUT CASE [CASE ...]

Each rank joins the gloo group torchrun describes, runs the named cases one after the other (the same on every rank,
so that every report's gather meets its partners), and writes OUT/CASE.rank<R>.json: the report's JSON and text,
and for the `collectives` case the collectives counted. Each case is a tiny MLP on 512 generated examples of 8
features (two classes), trained with the doctor's three lines on every rank, healthy or with one distributed fault
planted in the loop, never told to the doctor:

- `healthy`: DistributedDataParallel, a DistributedSampler, set_epoch each epoch.
- `no_sampler`: a plain shuffling DataLoader on every rank, seeded alike (as a script seeds every process):
  every rank trains on the same batches.
- `no_set_epoch`: a DistributedSampler whose set_epoch is never called.
- `out_of_sync`: rank 0 loads a checkpoint after the model was wrapped in DDP: the replicas never meet again.
- `summed` / `averaged_by_hand`: no DDP; the loop all_reduces each gradient itself, summed (the fault) or divided
  by the world size after (healthy).
- `accumulated` / `no_zero_grad`: DDP with two backward passes per step, the first under no_sync (healthy across
  ranks), and a loop that never zeroes .grad (a fault of one process, not of several): neither is a sum.
- `batchnorm` / `buffers_unsynced`: an MLP with BatchNorm under DDP, its buffers broadcast each forward
  (healthy) or not (broadcast_buffers=False: each rank keeps its own running statistics).
- `collectives`: the healthy loop twice under torch's profiler, without the doctor and with it, counting the
  collectives (every `gloo:` event: DDP's own from C++, and any torch.distributed call), then the report's, and
  those of one all_gather_object to compare it with.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from doctor import Doctor

EPOCHS, BATCH, RATE = 12, 32, 1e-2

_g = torch.Generator().manual_seed(0)
X = torch.randn(640, 8, generator=_g)
Y = (X[:, 0] + X[:, 1] > 0).long()
DATA = TensorDataset(X[:512], Y[:512])
VALIDATION = [(X[512:], Y[512:])]  # examples no rank trains on


def mlp(batchnorm: bool = False) -> nn.Module:
    if batchnorm:
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _loader(sampler: bool) -> DataLoader:
    if sampler:
        return DataLoader(DATA, batch_size=BATCH, sampler=DistributedSampler(DATA, shuffle=True, seed=0))
    return DataLoader(DATA, batch_size=BATCH, shuffle=True)


def train(case: str, watched: bool = True, epochs: int = EPOCHS):
    """One case's loop on this rank; its Doctor (or None when not `watched`)."""
    torch.manual_seed(0)  # every rank alike, as a script seeds every process: the same first weights and shuffles
    rank, world = dist.get_rank(), dist.get_world_size()
    net = mlp(batchnorm=case in ("batchnorm", "buffers_unsynced"))
    by_hand = case in ("summed", "averaged_by_hand")
    model = net if by_hand else DistributedDataParallel(net, broadcast_buffers=case != "buffers_unsynced")
    if case == "out_of_sync" and rank == 0:
        # The checkpoint is loaded on rank 0 only, after DDP copied rank 0's first weights to every rank.
        checkpoint = {name: value + 0.1 for name, value in net.state_dict().items()}
        net.load_state_dict(checkpoint)
    optimizer = torch.optim.Adam(model.parameters(), lr=RATE)
    loader = _loader(sampler=case != "no_sampler")
    doctor = Doctor(model, optimizer, nn.functional.cross_entropy, validation=VALIDATION) if watched else None
    for epoch in range(epochs):
        if case != "no_set_epoch" and isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        for x, y in doctor.watch(loader) if doctor is not None else loader:
            if case != "no_zero_grad":
                optimizer.zero_grad()
            if case == "accumulated":  # two halves, the first under no_sync: DDP averages the accumulated sum once
                with model.no_sync():
                    (nn.functional.cross_entropy(model(x[:16]), y[:16]) / 2).backward()
                x, y = x[16:], y[16:]
            loss = nn.functional.cross_entropy(model(x), y)
            (loss / 2 if case == "accumulated" else loss).backward()
            if by_hand:
                for p in net.parameters():
                    dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                    if case == "averaged_by_hand":
                        p.grad /= world
            if doctor is not None:
                doctor.after_backward(loss)
            optimizer.step()
    return doctor


def collectives(run) -> tuple[int, object]:
    """The collectives this process ran in run() (gloo's events, as torch's profiler records them), and its result."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiled:
        result = run()
    return sum(event.name.startswith("gloo:") for event in profiled.events()), result


def main(out: Path, cases: list[str]) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    try:
        for case in cases:
            result = {}
            if case == "collectives":
                bare, _ = collectives(lambda: train("healthy", watched=False, epochs=2))
                watched, doctor = collectives(lambda: train("healthy", epochs=2))
                at_report, report = collectives(doctor.report)
                one_gather, _ = collectives(lambda: dist.all_gather_object([None] * dist.get_world_size(), rank))
                result["collectives"] = {
                    "bare": bare,
                    "watched": watched,
                    "report": at_report,
                    "one_gather": one_gather,
                }
            else:
                report = train(case).report()
            result |= {"report": report.to_dict(), "text": str(report)}
            (out / f"{case}.rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
