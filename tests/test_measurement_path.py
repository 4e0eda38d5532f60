"""One measurement path: the doctor's looks leave each module's mode as the loop set it, and the task is read once.

A loop that keeps part of a training model in eval mode (a frozen backbone's BatchNorm) must still have it so after
the doctor has looked at the first batch, probed the output and evaluated: `model.train(was_training)` would have
switched it to training. And no look may call a module's own `train()`, where some backbones freeze their stages.
"""

import math

import pytest
import torch
from torch import nn

import harness.instruments.outputs as outputs_module
from doctor import Doctor
from harness.eval_mode import eval_mode
from harness.evaluation import evaluate
from harness.instruments import Instruments
from harness.targets import Task, TaskError, read_task


class Backbone(nn.Module):
    """A part the loop keeps in eval mode; its own train() records each call (where a backbone would freeze stages)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1))
        self.train_modes: list[bool] = []

    def train(self, mode: bool = True):
        self.train_modes.append(mode)
        return super().train(mode)

    def forward(self, x):
        return self.layers(x)


def model_with_a_part_in_eval_mode() -> tuple[nn.Module, Backbone]:
    torch.manual_seed(0)
    backbone = Backbone()
    model = nn.Sequential(backbone, nn.Linear(16, 3))
    model.train()
    backbone.layers[1].eval()  # the loop's choice: this BatchNorm keeps its statistics
    backbone.train_modes.clear()
    return model, backbone


def modes(model: nn.Module) -> list[bool]:
    return [module.training for module in model.modules()]


def batches(n: int = 30):
    generator = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randn(32, 6, generator=generator)
        yield x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def test_eval_mode_gives_every_module_its_own_mode_back_without_calling_train():
    model, backbone = model_with_a_part_in_eval_mode()
    before = modes(model)
    with eval_mode(model):
        assert not any(modes(model))
    assert modes(model) == before
    assert backbone.train_modes == []  # the flags are set: the backbone's own train() (freezing stages) never runs
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("the look failed")
    assert modes(model) == before  # given back when the look raises too
    evaluate(model, nn.CrossEntropyLoss(), list(batches(2)))
    assert modes(model) == before and backbone.train_modes == []


def test_the_doctor_leaves_the_loop_s_modes_as_the_loop_set_them():
    model, backbone = model_with_a_part_in_eval_mode()
    before = modes(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(
        model,
        optimizer,
        loss_fn,
        list(batches()),
        validation=list(batches(2)),
        model_factory=lambda: model_with_a_part_in_eval_mode()[0],
        census_every=5,
    )
    for x, y in doctor:
        assert modes(model) == before  # as the loop set them on every step, the first batch's look included
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    doctor.finish()
    assert modes(model) == before
    # The doctor's looks (the first batch, the census probes, the evaluations) never called the backbone's own
    # train(): one that freezes its stages there (mmpretrain's VGG) is not frozen by the doctor.
    assert backbone.train_modes == []


def test_the_task_is_read_once_by_the_doctor_and_once_by_a_cell_s_instruments(monkeypatch):
    reads = []
    original = outputs_module.task_of

    def counting(targets, output):
        reads.append(tuple(output.shape))
        return original(targets, output)

    monkeypatch.setattr(outputs_module, "task_of", counting)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss(), list(batches(6)), census_every=1)
    for x, y in doctor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    measured = doctor.finish().measurements
    assert reads == []  # the doctor read it at its first batch and handed it over
    assert doctor.task == Task("multiclass", 3, math.log(3))
    assert (measured["task"], measured["n_classes"], measured["ln_classes"]) == ("multiclass", 3, math.log(3))
    assert measured["loss_kind"] == "cross_entropy"  # the loss is still named, on the first training forward

    instruments = Instruments(model, optimizer, nn.CrossEntropyLoss(), census_every=1)
    for x, y in instruments.watch(batches(3)):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
    assert reads == [(32, 3)] and instruments.finish()["task"] == "multiclass"


def test_a_task_handed_to_the_instruments_must_be_one_they_know():
    model = nn.Linear(6, 3)
    instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match="unknown task 'classes': choose multiclass, onehot, binary"):
        instruments.task_read("classes")


@pytest.mark.parametrize(
    ("targets", "outputs", "expected"),
    [
        (torch.tensor([0, 2, 1, 1]), torch.zeros(4, 3), Task("multiclass", 3, math.log(3))),
        (torch.eye(4)[:, :3].contiguous()[:3], torch.zeros(3, 3), Task("onehot", 3, math.log(3))),
        (torch.tensor([[0.0], [1.0], [1.0]]), torch.zeros(3, 1), Task("binary", 2, math.log(2))),
        (torch.tensor([[1.0, 1.0], [0.0, 1.0]]), torch.zeros(2, 2), Task("multilabel", 2, math.log(2))),
        (torch.tensor([[1.0], [3.0]]), torch.zeros(2, 1), Task("regression", 1, 2.0)),
        (torch.tensor([[1, 2, -100]]), torch.zeros(1, 3, 5), Task("sequence", 5, math.log(5))),
    ],
)
def test_read_task_gives_the_kind_the_size_and_the_uninformed_loss(targets, outputs, expected):
    assert read_task(targets, outputs) == expected


def test_read_task_refuses_what_makes_no_task():
    with pytest.raises(TaskError, match="make no task the doctor covers"):
        read_task(torch.tensor([[0.5, 0.2]]), torch.zeros(1, 3))
