"""Two training processes on one CPU machine, for the recipes whose program trained data-parallel (DDP).

The doctor watches one model in the runner's process. A recipe whose program ran on two ranks runs rank 0 there (its
model is the one handed to `Doctor(...)`) and rank 1 in a second process that the recipe starts itself: inside
`two_ranks(__file__, "rank1", *args)` the recipe file is loaded again in a fresh "spawn" process, which runs its
module-level function `rank1(*args)`, and both processes join one gloo process group on 127.0.0.1 (a free port).
Each rank trains its replica on its own shard of the data, the same number of steps. On the way out the group is
destroyed and the child joined (terminated if it outlives TIMEOUT_S), whatever happened, so a failure on either side
never hangs the benchmark or leaves a group initialized in the runner's process (which may run several recipes).

The doctor is handed the plain module, never the DistributedDataParallel wrapper: its own forward passes (reading
the first batch, evaluating, its probes) then run no collective that rank 1 would have to match, and everything it
measures through hooks on the module still sees the wrapper's training steps.

`record(net, **counts)`, called by both ranks at the end of training, gathers each rank's counts and how far the two
replicas' parameters are apart; rank 0 keeps them in `LAST` (what the tests read: did both ranks train, are the
replicas equal). It is the benchmark's check, not part of the programs.
"""

import contextlib
import importlib.util
import multiprocessing
import socket
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

WORLD_SIZE = 2
TIMEOUT_S = 300  # the longest a rank waits for the other (a collective, the rendezvous), and for the child to end
LAST: dict = {}  # the last two-rank run's record on rank 0 (see record())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the rendezvous of the two ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _join(rank: int, port: int) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=TIMEOUT_S),
    )


def _leave(finished: bool) -> None:
    """Leave the group; a rank that `finished` its work first waits until the other is done with the group too.

    A rank that tore its side down while the other still held the connection made the other abort at exit now and
    then ("terminate called without an active exception", status -6: about 1 run in 7 of the slow test). A rank that
    failed does not wait: its partner may be inside a collective that a barrier would not match, and would hang
    there until TIMEOUT_S instead of failing when the connection closes.
    """
    if finished:
        with contextlib.suppress(RuntimeError):  # the other rank failed and left: nothing to wait for
            dist.barrier()
    dist.destroy_process_group()


def _load(path: str):
    """The recipe file as a module of its own name in the child (its module-level data built again)."""
    file = Path(path)
    name = f"_rank1_{file.parent.name.replace('-', '_')}_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _rank1(path: str, function: str, port: int, args: tuple) -> None:
    """Rank 1's process: one thread, the group joined first (so rank 0 never waits on a child that failed to load)."""
    torch.set_num_threads(1)
    _join(1, port)
    finished = False
    try:
        getattr(_load(path), function)(*args)
        finished = True
    finally:
        _leave(finished)


@contextlib.contextmanager
def two_ranks(recipe_file: str, function: str, *args):
    """Run the body as rank 0 while a spawned process runs `function(*args)` of `recipe_file` as rank 1.

    Raises if rank 1 fails (a non-zero exit) or outlives TIMEOUT_S after the body; an error of the body itself
    passes through unchanged after the same clean-up.
    """
    if dist.is_available() and dist.is_initialized():
        raise RuntimeError("a process group is already initialized in this process: two_ranks starts its own")
    LAST.clear()
    port = free_port()
    child = multiprocessing.get_context("spawn").Process(
        target=_rank1, args=(str(Path(recipe_file).resolve()), function, port, args), daemon=True
    )
    child.start()
    finished = False
    try:
        _join(0, port)
        yield
        finished = True
    finally:
        if dist.is_initialized():
            _leave(finished)
        child.join(TIMEOUT_S)
        if child.is_alive():
            child.terminate()
            child.join(10)
    if child.exitcode != 0:
        name = f"{Path(recipe_file).parent.name}/{Path(recipe_file).name}"
        raise RuntimeError(f"rank 1 of {name} exited with status {child.exitcode} (its traceback is on stderr)")


class Unwatched:
    """Rank 1's stand-in for the doctor: the loop's calls, watching nothing."""

    def watch(self, batches):
        return iter(batches)

    def after_backward(self, loss) -> None:
        pass


def share_weights(net: nn.Module) -> None:
    """Every rank's parameters and buffers set to rank 0's (as when every rank loads the same checkpoint)."""
    with torch.no_grad():
        for tensor in [*net.parameters(), *net.buffers()]:
            dist.broadcast(tensor, src=0)


def replica_gap(net: nn.Module) -> float:
    """The largest difference between the two ranks' parameters (0.0: the replicas are identical)."""
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(WORLD_SIZE)]
    dist.all_gather(gathered, flat)
    return float((gathered[0] - gathered[1]).abs().max())


def record(net: nn.Module, **counts) -> dict:
    """Both ranks, after training: each rank's counts (e.g. steps) and the replicas' gap, kept in LAST on rank 0."""
    gathered: list = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, counts)
    result = {name: [c[name] for c in gathered] for name in counts}
    result["gap"] = replica_gap(net)
    if dist.get_rank() == 0:
        LAST.clear()
        LAST.update(result)
    return result
