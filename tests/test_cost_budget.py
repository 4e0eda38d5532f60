"""The doctor's cost budget (harness/instruments/budget.py): what it watches, what it reads on every step anyway.

The budget's decisions rest on the host's clock; these tests replace them with fixed patterns (a CostBudget whose
`allows` is given), so that what they check (whole optimizer cycles, census steps, every-step readings, the same
measurements when everything is watched) does not depend on how busy the machine is.
"""

import math

import pytest
import torch
from torch import nn

from doctor import Doctor
from harness.instruments import Instruments
from harness.instruments.budget import Cost, CostBudget

TIMING = {"data_wait_s", "loop_s", "data_wait_share"}


class Pattern(CostBudget):
    """A budget that allows the cycles and censuses `allowed(next_step)` says, whatever they cost."""

    def __init__(self, allowed, dense_steps: int = 0):
        super().__init__(share=0.03, dense_steps=dense_steps)
        self.allowed, self.asked = allowed, []

    def allows(self, next_step: int, loop_start) -> bool:
        self.asked.append(next_step)
        return next_step < self.dense_steps or self.allowed(next_step)


def batches(n: int = 40, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n * 16, 8, generator=generator)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return [(x[i : i + 16], y[i : i + 16]) for i in range(0, n * 16, 16)]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))


def train(instruments_or_doctor, net, optimizer, data, accumulate: int = 1, zero_grad: bool = True):
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(instruments_or_doctor.watch(data)):
        loss = loss_fn(net(x), y)
        loss.backward()
        instruments_or_doctor.after_backward(loss)
        if (i + 1) % accumulate == 0:
            optimizer.step()
            if zero_grad:
                optimizer.zero_grad()


def measured(budget, accumulate: int = 1, zero_grad: bool = True, steps: int = 40) -> tuple[dict, Instruments]:
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    instruments = Instruments(net, optimizer, nn.CrossEntropyLoss(), census_every=8, budget=budget)
    train(instruments, net, optimizer, batches(steps), accumulate, zero_grad)
    return instruments.finish(), instruments


@pytest.mark.parametrize("share", [0, -0.1, 1.5, "3%", None, True])
def test_a_budget_outside_0_1_is_refused_naming_the_value(share):
    with pytest.raises(ValueError, match=r"share of the loop's time in \(0, 1\]"):
        CostBudget(share)


@pytest.mark.parametrize("dense", [-1, 2.5, "10"])
def test_dense_steps_must_be_a_count(dense):
    with pytest.raises(ValueError, match="dense_steps must be an int >= 0"):
        CostBudget(dense_steps=dense)


def test_a_budget_that_allows_everything_measures_what_no_budget_does():
    """The sampling machinery changes nothing when every cycle is watched: the grid's records stay as they were."""
    free, _ = measured(Pattern(lambda step: True))
    none, _ = measured(None)
    assert free.keys() == none.keys()
    for name, value in none.items():
        if name in TIMING:
            continue
        other = free[name]
        assert other == value or (isinstance(value, float) and math.isnan(value) and math.isnan(other)), name


def test_unwatched_cycles_still_read_the_loss_every_step_and_the_census_on_schedule():
    none, _ = measured(None)
    sparse, instruments = measured(Pattern(lambda step: step % 10 == 0, dense_steps=3))
    assert len(sparse["train_loss_curve"]) == 40  # the loss of every step
    assert sparse["train_loss_curve"] == none["train_loss_curve"]  # the same run: sampling changes no update
    # The schedule's censuses (0, 1, 2, 4, 8, 16, 24, 32 at census_every=8) within the dense steps; after them one
    # refused is owed: taken on the step after a cycle the budget let the instruments watch (10, 20, 30), or at the
    # next scheduled one, which is never refused after a refusal (4 refused, 8 taken; 16 refused, 21 taken; ...).
    assert none["census_steps"] == [0, 1, 2, 4, 8, 16, 24, 32]
    assert sparse["census_steps"] == [0, 1, 2, 8, 21, 31]
    assert instruments.cost.watched_steps < instruments.cost.steps == 40


def test_whole_optimizer_cycles_are_watched_never_part_of_one():
    """With 4 backward passes per step, a watched cycle holds all 4: the backward passes per step read 4, not less."""
    sparse, instruments = measured(Pattern(lambda step: step % 12 == 0, dense_steps=0), accumulate=4)
    assert sparse["backwards_per_step"] == 4
    assert instruments.cost.watched_steps % 4 == 0
    assert 0 < instruments.cost.watched_steps < 40


def test_uncleared_gradients_are_read_on_the_sampled_cycles():
    sparse, _ = measured(Pattern(lambda step: step % 8 == 0, dense_steps=0), zero_grad=False)
    assert sparse["grad_carried_share"] == 1.0
    cleared, _ = measured(Pattern(lambda step: step % 8 == 0, dense_steps=0))
    assert cleared["grad_carried_share"] == 0.0


def test_a_nan_loss_on_an_unwatched_step_is_found_with_its_origin():
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    data = batches(30)
    data[20] = (torch.full_like(data[20][0], float("nan")), data[20][1])
    # A budget that watches nothing after the first 2 steps: step 20's NaN comes on an unwatched cycle.
    doctor = Doctor(net, optimizer, nn.CrossEntropyLoss(), budget=Pattern(lambda step: False, dense_steps=2))
    train(doctor, net, optimizer, data)
    report = doctor.report()
    assert report.verdict == "nonfinite_loss"
    assert doctor.nonfinite.origin.step == 20
    assert "input" in doctor.nonfinite.origin.what


def test_the_report_says_what_the_doctor_cost_and_what_it_watched():
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    doctor = Doctor(net, optimizer, nn.CrossEntropyLoss())
    train(doctor, net, optimizer, batches(30))
    report = doctor.report()
    assert isinstance(report.cost, Cost) and report.cost.steps == 30
    assert report.cost.spent_s > 0 and report.cost.loop_s > 0
    assert f"budget {3:g}%" in str(report).splitlines()[-1]
    assert report.to_dict()["cost"]["steps"] == 30


def test_without_a_budget_every_step_is_watched_and_no_cost_is_claimed():
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    doctor = Doctor(net, optimizer, nn.CrossEntropyLoss(), budget=None)
    train(doctor, net, optimizer, batches(30))
    assert doctor.report().cost is None
    assert "the doctor's cost" not in str(doctor.report())


def test_the_doctor_refuses_a_budget_it_cannot_keep():
    with pytest.raises(ValueError, match=r"0\.03"):
        Doctor(model(), torch.optim.SGD(model().parameters(), lr=0.1), nn.CrossEntropyLoss(), budget=3)


@pytest.mark.slow  # a Lightning fit (about 4 s)
@pytest.mark.parametrize("budget", [0.03, None])
def test_the_lightning_callback_takes_the_budget_and_reports_its_cost(budget):
    """The callbacks pass `budget=` on to their doctor: its report says what it cost, or claims nothing without one."""
    pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    from doctor.integrations.lightning import DoctorCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _index):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    data = batches(30)
    loader = DataLoader(TensorDataset(torch.cat([x for x, _ in data]), torch.cat([y for _, y in data])), 16)
    callback = DoctorCallback(nn.CrossEntropyLoss(), budget=budget)
    trainer = pl.Trainer(
        max_steps=30,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[callback],
    )
    trainer.fit(Module(), loader)
    cost = callback.report.cost
    assert (cost is None) if budget is None else (cost.steps == 30 and cost.share_budget == budget)
