"""The report's time budget (harness/instruments/budget.py: ReportBudget), pass by pass.

What the doctor does after the loop is timed pass by pass, and a fit of fresh models that would run past the budget
is cut and said to be not measured.

Issue 51: a 3.8 s run waited almost ten minutes for its report, and the cost line said 3.6%. These tests give fits
of known length a budget they cannot or can keep to; the doctor's tests then cut its real fits with a spent budget.
"""

import json
import math
import time

import jsonschema
import pytest
import torch
from conftest import ROOT
from test_doctor import loop_over_the_doctor
from torch import nn

from doctor import Doctor
from harness.instruments.budget import ReportBudget


def sleepy_fit(steps: int, step_s: float):
    """A fit of `steps` steps of `step_s` seconds each, calling the check it is given once a step, as the probes do."""

    def fit(check) -> dict:
        for _ in range(steps):
            time.sleep(step_s)
            check()
        return {"fitted": steps}

    return fit


@pytest.mark.parametrize(("share", "floor_s"), [(0, 30), (-0.1, 30), ("25%", 30), (True, 30), (0.25, -1), (0.25, "30")])
def test_a_budget_that_means_nothing_is_refused_naming_the_value(share, floor_s):
    with pytest.raises(ValueError, match="report budget"):
        ReportBudget(share, floor_s)


def test_the_budget_is_the_larger_of_its_share_of_the_loop_and_its_floor():
    budget = ReportBudget(share=0.25, floor_s=30)
    budget.start(loop_s=40)
    assert budget.allowed_s == 30
    budget.start(loop_s=400)
    assert budget.allowed_s == 100


def test_a_fit_that_would_run_past_the_budget_is_cut_early_and_recorded_as_not_measured():
    budget = ReportBudget(share=0.25, floor_s=3.0)
    budget.start(loop_s=0.0)
    began = time.perf_counter()
    measured = budget.run("a clean copy", 1000, sleepy_fit(1000, 0.01), {"fitted": math.nan})
    # Cut once its first half second projects ten seconds, not when the budget has gone: the report does not wait.
    assert time.perf_counter() - began < 2.0
    assert math.isnan(measured["fitted"])
    assert " of 1000 steps" in budget.cut["a clean copy"] and "would have ended" in budget.cut["a clean copy"]
    assert budget.passes["a clean copy"] < 2.0


def test_a_fit_within_the_budget_runs_to_its_end_and_is_timed():
    budget = ReportBudget(share=0.25, floor_s=5)
    budget.start(loop_s=0.0)
    assert budget.run("memorization", 20, sleepy_fit(20, 0.001), {"fitted": math.nan}) == {"fitted": 20}
    assert budget.cut == {} and 0.02 <= budget.passes["memorization"] < 5


def test_a_fit_whose_budget_is_spent_is_not_started():
    budget = ReportBudget(share=0.25, floor_s=0)
    budget.start(loop_s=0.0)
    time.sleep(0.01)
    started = []
    assert budget.run("memorization", 5, lambda check: started.append(1) or {}, {"fitted": math.nan}) == {
        "fitted": math.nan
    }
    assert not started and budget.cut["memorization"] == "not started: the budget was spent"


def digits_like(n: int = 512, seed: int = 0) -> list[tuple]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    y = (x[:, :3].sum(dim=1) > 0).long() + (x[:, 3] > 0).long()
    return [(x[i : i + 32], y[i : i + 32]) for i in range(0, n, 32)]


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))


def watched(report_budget, steps: int = 60) -> Doctor:
    torch.manual_seed(0)
    net = model()
    optimizer, loss_fn = torch.optim.Adam(net.parameters(), lr=1e-2), nn.CrossEntropyLoss()
    data = digits_like()
    doctor = Doctor(
        net, optimizer, loss_fn, validation=digits_like(256, seed=1), model_factory=model, report_budget=report_budget
    )
    for step, (x, y) in enumerate(doctor.watch(data * 4)):
        if step == steps:
            break
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    return doctor


def test_the_doctor_times_each_pass_after_the_loop_and_says_so_in_its_cost_line():
    report = watched(ReportBudget()).report()
    cost = report.cost
    assert {"evaluations", "memorization", "a clean copy", "quick references"} <= set(cost.after_passes)
    assert sum(cost.after_passes.values()) <= cost.after_s  # the passes are within the whole, and make most of it
    assert cost.after_budget_s == 30 and not cost.after_cut  # a short loop: the floor, and nothing cut
    line = cost.line()
    assert "of a 30 s budget" in line and "a clean copy" in line and "cut at the budget" not in line
    assert not math.isnan(report.measurements["capacity_score"])


def test_fits_the_budget_cuts_are_not_measured_and_the_checks_that_read_them_not_judged():
    budget = ReportBudget(share=1e-9, floor_s=0)  # spent before any fit starts
    report = watched(budget).report()
    assert set(report.cost.after_cut) == {"memorization", "a clean copy"}
    assert math.isnan(report.measurements["capacity_score"]) and math.isnan(report.measurements["memorize_best_loss"])
    assert "model_too_small not judged: a clean copy was cut at the report's time budget" in report.note
    assert "not measured (cut at the report's time budget" in str(report)
    document = json.loads(json.dumps(report.to_dict()))
    jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "report.schema.json").read_text())).validate(document)
    assert set(document["cost"]["after_cut"]) == {"memorization", "a clean copy"}


def test_without_a_report_budget_nothing_is_cut_and_the_json_says_none():
    report = watched(None).report()
    assert not report.cost.after_cut and "budget" not in report.cost.after_line()
    assert report.to_dict()["cost"]["after_budget_s"] is None
    assert not math.isnan(report.measurements["capacity_score"])


def test_a_fit_that_runs_out_of_the_devices_memory_is_not_measured_and_the_run_is_still_reported():
    # A fresh copy and its optimizer beside the trained model can exceed an accelerator's memory at the report:
    # simulated here by a factory whose copies raise torch's out-of-memory error on their first forward.
    class NoRoom(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model()

        def forward(self, x):
            if not torch.is_grad_enabled() or not self.training:
                return self.inner(x)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    torch.manual_seed(0)
    net = model()
    optimizer, loss_fn = torch.optim.Adam(net.parameters(), lr=1e-2), nn.CrossEntropyLoss()
    doctor = Doctor(
        net, optimizer, loss_fn, digits_like() * 2, validation=digits_like(256, seed=1), model_factory=NoRoom
    )
    report = loop_over_the_doctor(doctor, net, optimizer, loss_fn)
    assert report.cost.after_cut["a clean copy"].startswith("ran out of the device's memory: CUDA out of memory")
    assert "memorization" in report.cost.after_cut and math.isnan(report.measurements["capacity_score"])
    assert report.verdict == "healthy", str(report)
