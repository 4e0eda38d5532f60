"""The doctor's reads of validation while the run trains (doctor/validation_reads.py): when, and what they record."""

import itertools
import time

import torch
from torch import nn

from doctor import Doctor
from doctor.validation_reads import MIN_GAP, PER_RUN, ValidationReads
from harness.instruments.budget import CostBudget


def spaced(steps: int, reads: ValidationReads) -> list[int]:
    taken = []
    for step in range(steps):
        if reads.due(step, loop_start=0.0):
            reads.read(step, 0.0)
            taken.append(step)
    return taken


def test_without_a_budget_reads_are_spaced_by_min_gap_then_thin_out_with_the_run():
    taken = spaced(3000, ValidationReads(None))
    assert taken[:3] == [0, MIN_GAP, 2 * MIN_GAP]
    gaps = [b - a for a, b in itertools.pairwise(taken)]
    assert all(gap >= max(MIN_GAP, at // PER_RUN) for gap, at in zip(gaps, taken[1:], strict=True))
    late = [s for s in taken if s >= 0.75 * 3000]
    assert 8 <= len(late) <= 11  # about PER_RUN x ln(4/3) in the last quarter, whatever the run's length


def test_under_a_budget_a_read_waits_until_the_budget_has_room_for_it():
    budget = CostBudget(share=0.03)
    reads = ValidationReads(budget)
    reads.read(0, seconds=1.0)  # the first read cost a second
    budget.spent_s = budget.start_s = 0.5
    assert not reads.due(100, loop_start=None)  # no loop time yet: no share to spend
    began = time.perf_counter() - 10.0  # ten seconds of loop: 0.3 s of budget, less than a read
    assert not reads.due(100, loop_start=began)
    began = time.perf_counter() - 60.0  # a minute: 1.8 s, room for a read of a second
    assert reads.due(100, loop_start=began)


def test_the_doctor_records_its_validation_reads_as_a_cells_curve_ending_at_the_runs_end():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(640, 8, generator=generator)
    y = (x[:, :4].sum(dim=1) > 0).long()
    data = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 512, 32)]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer, loss_fn = torch.optim.SGD(net.parameters(), lr=0.1), nn.CrossEntropyLoss()
    doctor = Doctor(net, optimizer, loss_fn, validation=[(x[512:], y[512:])], budget=None)
    for _ in range(5):  # 80 steps
        for inputs, targets in doctor.watch(data):
            optimizer.zero_grad()
            loss = loss_fn(net(inputs), targets)
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    m = doctor.finish().measurements
    assert m["val_steps"] == [*range(0, 80, MIN_GAP), 80]
    assert len(m["val_loss_curve"]) == len(m["val_acc_curve"]) == len(m["val_steps"])
    assert m["val_loss_curve"][-1] == m["final_val_loss"] and m["val_loss_curve"][0] == doctor.val_start[0]
    assert m["val_loss_curve"][-1] < m["val_loss_curve"][0]
