"""The instruments give known answers on hand-made tiny models, and never change the training they watch."""

import math
import time

import pytest
import torch
from conftest import SHORT, make_config
from torch import nn

from harness.cell import measure
from harness.instruments import Instruments, dead_units, memorize


class TwoHeads(nn.Module):
    """A 1-in, 2-class linear model with all-zero weights, plus a layer the forward pass never uses."""

    def __init__(self):
        super().__init__()
        self.used = nn.Linear(1, 2, bias=False)
        nn.init.zeros_(self.used.weight)
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.used(x)


def one_step(model, instruments, x, y, zero_grad=True, optimizer=None):
    loss = nn.functional.cross_entropy(model(x), y)
    if zero_grad:
        instruments.optimizer.zero_grad()
    loss.backward()
    instruments.after_backward(loss)
    instruments.optimizer.step()


def test_first_loss_and_gradient_census_known_answer():
    # Zero weights: logits [0, 0], p = [1/2, 1/2], loss ln 2, dL/dW = (p - onehot) x = [[-1/2], [1/2]].
    model = TwoHeads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    batch = (torch.tensor([[1.0]]), torch.tensor([0]))
    for x, y in instruments.watch([batch]):
        one_step(model, instruments, x, y)
    m = instruments.finish()
    assert m["first_loss"] == pytest.approx(math.log(2))
    assert m["param_names"] == ["used.weight", "unused.weight", "unused.bias"]
    assert m["grad_norm"][0] == pytest.approx(math.sqrt(0.5))
    assert m["grad_max"][0] == pytest.approx(0.5)
    assert m["grad_zero_share"][0] == 0.0
    assert m["grad_missing"] == [False, True, True]
    assert m["params_without_grad"] == 2
    assert m["params_without_grad_share"] == pytest.approx(12 / 14)  # 9 + 3 of 2 + 9 + 3 elements
    assert m["update_ratio"][0] != m["update_ratio"][0]  # NaN: a zero weight has no scale to compare with


def test_accumulation_ratio_is_one_when_zeroed_and_grows_without_zero_grad():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for zero_grad, expected in [(True, 1.0), (False, 2.0)]:
        model = nn.Linear(4, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # rate 0: the same gradient at every step
        instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
        for xb, yb in instruments.watch([(x, y)] * 2):
            one_step(model, instruments, xb, yb, zero_grad=zero_grad)
        m = instruments.finish()
        assert m["accumulation_ratio"] == pytest.approx(expected)  # step 1 holds g0 + g1 = 2 g when not zeroed
        assert m["accumulation_ratio_curve"][0] == pytest.approx(1.0)


def test_update_ratio_known_answer():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(2.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.mse_loss, census_every=1)
    x, y = torch.tensor([[1.0]]), torch.tensor([[0.0]])
    for xb, yb in instruments.watch([(x, y)]):
        loss = nn.functional.mse_loss(model(xb), yb)  # (2 - 0)^2, gradient 2 * 2 = 4
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()  # w: 2 -> 2 - 0.1 * 4 = 1.6
    assert instruments.finish()["update_ratio"] == [pytest.approx(0.4 / 2.0)]


def test_dead_units_known_answers():
    layer = nn.Linear(2, 2)
    model = nn.Sequential(layer, nn.ReLU())
    x = torch.randn(32, 2)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.tensor([-1.0, 1.0]))  # unit 0 always 0, unit 1 always 1
    assert dead_units(model, x) == (0.5, [0.5])
    with torch.no_grad():
        layer.bias.fill_(-100.0)
    assert dead_units(model, x)[0] == 1.0
    assert dead_units(nn.Linear(2, 2), x) == (pytest.approx(float("nan"), nan_ok=True), [])


def test_dead_units_counts_channels_and_leaves_batchnorm_alone():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    before = model[1].running_mean.clone()
    share, layers = dead_units(model, torch.randn(5, 1, 6, 6))
    assert len(layers) == 1 and 0.0 <= share <= 1.0
    assert torch.equal(model[1].running_mean, before) and model.training


def test_data_wait_share_sees_a_slow_iterator():
    def slow(n, pause):
        for _ in range(n):
            time.sleep(pause)
            yield torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)

    for pause, low, high in [(0.02, 0.8, 1.0), (0.0, 0.0, 0.5)]:
        model = nn.Linear(1, 2)
        instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy)
        for x, y in instruments.watch(slow(10, pause)):
            one_step(model, instruments, x, y)
            time.sleep(0.001)  # a little work per step
        m = instruments.finish()
        assert low <= m["data_wait_share"] <= high
        assert m["data_wait_s"] <= m["loop_s"]


def test_memorize_fits_separable_examples_and_fails_with_dead_units():
    torch.manual_seed(0)
    x, y = torch.randn(16, 8), torch.arange(16) % 4

    def healthy():
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    def dead():
        model = healthy()
        nn.init.constant_(model[0].bias, -100.0)
        return model

    good = memorize(healthy, x, y, nn.functional.cross_entropy, steps=200)
    bad = memorize(dead, x, y, nn.functional.cross_entropy, steps=200)
    assert good["memorize_rates"] == [1e-4, 1e-3, 1e-2]
    assert good["memorize_best_loss"] < 0.05 and good["memorize_best_rate"] == 1e-2
    assert bad["memorize_best_loss"] > 1.0  # only the output bias learns: the class prior, ln 4 = 1.39


def test_instruments_do_not_change_the_training_they_watch():
    cfg = make_config(*SHORT, "fault=no_zero_grad")  # the census recomputes gradients: it must leave no trace
    observed = measure(cfg, torch.device("cpu"), instrumented=True)
    bare = measure(cfg, torch.device("cpu"), instrumented=False)
    for key in ("final_train_loss", "final_val_loss", "final_val_acc", "memorize_best_loss"):
        assert observed[key] == bare[key], key
