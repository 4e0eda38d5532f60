"""The loader judged on its own terms (issue 50, part 6): other processes on the host do not move the data wait.

On a busy host the loop's thread, and its loader's workers, wait for a CPU now and then. The doctor takes those
waits (the run queue, harness/instruments/data_wait.py: HostQueues) out of each `next()` and out of the loop's
time, so that a loader that sleeps on its files keeps its ratio however busy the host, and the loop's own compute
is never below zero ("not measured"). Here the host is scripted: a fake wall clock and fake run-queue counters,
moved by the batches and the steps, so that nothing depends on this machine's speed or load. The advice for a
starved loop reads the loader's workers. The last test starts a real DataLoader's workers (Linux: the run queues
are read from /proc) and checks that they are the ones found, not how fast they are.
"""

import math
import os
import threading

import pytest
import torch
from hand_records import PLANTED, record
from torch.utils.data import DataLoader, Dataset, TensorDataset

from analysis.checks.evidence import loader_fixes
from analysis.features import features
from analysis.rules import diagnose, load_thresholds
from harness.instruments.data_wait import DataWait, HostQueues, RunQueue


class Host:
    """A scripted host: a wall clock, and the run-queue seconds of the loop's thread and of each worker."""

    def __init__(self):
        self.now = 0.0
        self.queued = {"loop": 0.0}
        self.ended: set[int] = set()  # workers whose file can no longer be read
        self.running: set[int] = set()  # the loop thread's child processes
        self.closed: list[object] = []
        self.blocks = 0

    def clock(self) -> float:
        return self.now

    def usage(self) -> tuple[float, int]:
        """The loop's thread's CPU seconds and count of blocks: one block more at each read.

        The scripted loaders sleep or wait on workers in every `next()` (one that computes on the loop's thread is
        tests/test_data_wait.py's, on the real host).
        """
        self.blocks += 1
        return 0.0, self.blocks

    def passes(self, wall: float, loop: float = 0.0, **workers: float) -> None:
        """`wall` seconds go by, of which the loop's thread spent `loop` in the run queue, and each worker its own."""
        self.now += wall
        self.queued["loop"] += loop
        for name, queued in workers.items():
            self.queued[int(name.removeprefix("w"))] += queued

    def queue(self, who) -> "FakeQueue":
        self.queued.setdefault(who, 0.0)
        return FakeQueue(self, who)

    def queues(self) -> HostQueues:
        """HostQueues over this host's counters: the loop's thread is the calling one."""
        return HostQueues(self.queue("loop"), started=lambda: set(self.running), worker_queue=self.queue)


class FakeQueue(RunQueue):
    def __init__(self, host: Host, who):
        self.host, self.who = host, who
        self.thread = threading.get_ident() if who == "loop" else None

    def seconds(self) -> float:
        if self.who in self.host.ended:
            raise OSError("the worker has ended")
        return self.host.queued[self.who]

    def close(self) -> None:
        self.host.closed.append(self.who)


def run(host: Host, batches, step=None, exclude: bool = True) -> dict:
    """The loop: each batch waited for through DataWait, then `step(host)`; the collector's final columns."""
    wait = DataWait(exclude_host_pauses=exclude, clock=host.clock, host_queues=host.queues, usage=host.usage)
    for _, waited in wait.timed(batches):
        wait.add(waited)
        if step is not None:
            step(host)
    wait.close()
    return wait.columns(final=True)


def sleeping_loader(host: Host, n: int, asleep: float, queued: float):
    """A loader on the loop's thread that sleeps `asleep` per batch (files), then waits `queued` for a CPU."""
    for _ in range(n):
        host.passes(asleep + queued, loop=queued)
        yield torch.zeros(1)


def busy_step(compute: float, queued: float):
    return lambda host: host.passes(compute + queued, loop=queued)


@pytest.mark.parametrize("load", [0.0, 0.01, 0.2])
def test_a_sleeping_loader_has_the_same_ratio_however_busy_the_host(load):
    # 10 ms asleep per batch and 5 ms of compute per step: 2 s waited per second of compute, on an idle host and
    # on one where every wake-up and every step waits 10 or 200 ms for a CPU.
    host = Host()
    measured = run(host, sleeping_loader(host, 20, asleep=0.01, queued=load), busy_step(0.005, load))
    assert measured["data_wait_s"] == pytest.approx(0.2)
    assert measured["loop_s"] == pytest.approx(0.3)
    assert features(measured)["data_wait_ratio"] == pytest.approx(2.0)


def test_a_busy_host_no_longer_leaves_the_loop_without_compute_of_its_own():
    # Before: the run queue came off the loop's time but not off a wait that blocked, so a loader waking from its
    # sleeps into a busy run queue waited longer than the loop lasted, and the loader was "not measured".
    host = Host()
    waits = sleeping_loader(host, 20, asleep=0.01, queued=0.05)
    measured = run(host, waits, busy_step(0.005, 0.05))
    assert measured["loop_s"] - measured["data_wait_s"] == pytest.approx(0.1)
    assert not math.isnan(features(measured)["data_wait_ratio"])


def test_the_grid_keeps_the_wall_clock():
    host = Host()
    measured = run(host, sleeping_loader(host, 20, asleep=0.01, queued=0.05), busy_step(0.005, 0.05), exclude=False)
    assert measured["data_wait_s"] == pytest.approx(20 * 0.06) and measured["loop_s"] == pytest.approx(20 * 0.115)


class Workers:
    """A loader with two worker processes (pids 101, 102), started by iter() as a DataLoader starts its own."""

    num_workers = 2

    def __init__(self, host: Host, n: int, queued: tuple[float, float] = (0.012, 0.005)):
        self.host, self.n, self.queued = host, n, queued

    def __iter__(self):
        self.host.running |= {101, 102}
        return self.batches()

    def batches(self):
        self.host.passes(0.3)  # the workers start, and make the first batch
        yield torch.zeros(1)
        for _ in range(self.n - 1):
            # The loop blocked 20 ms: worker 101 (whose batch it was) queued 12 of them, 102 queued 5, and the
            # loop's thread, once woken, 3.
            self.host.passes(0.02, loop=0.003, w101=self.queued[0], w102=self.queued[1])
            yield torch.zeros(1)


def test_a_wait_on_workers_leaves_out_their_waits_for_a_cpu():
    host = Host()
    host.running = {7}  # a process the loop's thread started before: not the loader's
    measured = run(host, Workers(host, 11), busy_step(0.005, 0.0))
    # The first batch waited its 0.3 s (its workers not known yet); each other 20 - 3 - 12 ms.
    assert measured["data_wait_s"] == pytest.approx(0.3 + 10 * 0.005)
    assert measured["loader_workers"] == 2.0
    assert sorted(w for w in host.closed if w != "loop") == [101, 102]  # found, and closed at the end


def test_a_worker_that_ended_is_dropped():
    host = Host()
    wait = DataWait(exclude_host_pauses=True, clock=host.clock, host_queues=host.queues, usage=host.usage)
    batches = wait.timed(Workers(host, 3))
    next(batches)
    assert set(wait._host.workers) == {101, 102}
    host.ended.add(102)
    _, waited = next(batches)
    assert set(wait._host.workers) == {101} and 102 in host.closed
    assert waited == pytest.approx(0.02 - 0.003 - 0.012)  # 101, still read, queued 12 ms of it


def test_a_wait_is_never_below_zero():
    # A worker queued longer than the loop waited (for a later batch, say): the wait is 0, not negative.
    host = Host()
    measured = run(host, Workers(host, 3, queued=(0.05, 0.0)), busy_step(0.005, 0.0))
    assert measured["data_wait_s"] == pytest.approx(0.3)


def test_short_waits_are_taken_as_timed():
    # Under half a millisecond no pause of the OS moves a ratio: the run queues are not read again.
    host = Host()

    def quick():
        for _ in range(3):
            host.passes(0.0002, loop=0.0001)
            yield 1

    wait = DataWait(exclude_host_pauses=True, clock=host.clock, host_queues=host.queues, usage=host.usage)
    assert [waited for _, waited in wait.timed(quick())] == pytest.approx([0.0002] * 3)


def test_the_loader_s_settings_are_read_and_only_from_a_loader():
    wait = DataWait()
    wait.loader(iter([1, 2]))  # a generator says nothing about workers
    assert math.isnan(wait.columns(final=True)["loader_workers"])
    wait.loader(DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2, num_workers=0))
    assert wait.columns(final=True)["loader_workers"] == 0.0
    assert "loader_workers" not in wait.columns(final=False)  # not a step budget's column


def test_the_doctor_reads_the_loader_before_its_step_budget_wraps_it():
    from torch import nn

    from doctor import Doctor

    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss(), max_steps=2)
    for x, y in doctor.watch(DataLoader(data, batch_size=4, num_workers=0)):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    assert doctor.instruments.data_wait.loader_workers == 0.0


STARVED = PLANTED["starved_loader"]


@pytest.mark.parametrize(
    ("workers", "says", "never"),
    [
        (math.nan, "num_workers > 0", "workers fall behind"),  # not a DataLoader (the grid): the check's own
        (0.0, "num_workers=4", "workers fall behind"),
        (2.0, "its 2 workers fall behind", "num_workers=4"),
    ],
)
def test_the_advice_for_a_starved_loop_reads_the_loader_s_workers(workers, says, never):
    starved = record(**STARVED, loader_workers=workers)
    finding = diagnose(starved, thresholds=load_thresholds(starved["steps"]))[0]
    assert finding.verdict == "starved_loader"
    assert says in finding.next_step and never not in finding.next_step
    assert ("num_workers=0 or larger batches" in loader_fixes(starved)) == (workers > 0)


def test_the_checklist_s_loader_line_reads_the_loader_s_workers():
    from doctor.machine import _loader_keeps_up

    line = _loader_keeps_up(record(**STARVED, loader_workers=3.0), limit=0.7)
    assert line.ok is False and "its 3 workers fall behind" in line.detail
    line = _loader_keeps_up(record(**STARVED, loader_workers=0.0), limit=0.7)
    assert "DataLoader(num_workers=4" in line.detail


class Pid(Dataset):
    """Each example is the id of the process that made it: a worker's pid, read back in the batches."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return os.getpid()


@pytest.mark.skipif(HostQueues.of_this_thread() is None, reason="needs Linux: a thread's schedstat")
def test_the_workers_found_are_the_loader_s_own():
    wait = DataWait(exclude_host_pauses=True)
    loader = DataLoader(Pid(), batch_size=2, num_workers=2)
    makers, found = set(), set()
    for batch, waited in wait.timed(loader):
        makers |= set(batch.tolist())
        found |= set(wait._host.workers)
        assert waited >= 0.0
    assert makers == found and len(found) == 2 and os.getpid() not in found
    wait.close()
