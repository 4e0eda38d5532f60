"""The instruments give known answers on hand-made tiny models, and never change the training they watch."""

import math
import statistics
import time

import pytest
import torch
from conftest import SHORT, make_config
from optimizer_step import clip_and_step
from torch import nn

from harness.cell import measure
from harness.instruments import Instruments, activation_census, dead_units, memorize, periodicity, spikes
from harness.instruments.loop import Collector
from harness.records import CHECKPOINT_COLUMNS, SCHEMA


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


def observed_steps(instruments, model, steps=3):
    """A few steps of a 4-in, 3-class loop under `instruments`, with a snapshot after each."""
    snapshots = []
    for x, y in instruments.watch([(torch.randn(16, 4), torch.randint(0, 3, (16,)))] * steps):
        one_step(model, instruments, x, y)
        snapshots.append(instruments.snapshot())
    return snapshots


def test_every_column_comes_from_one_collector_and_is_a_record_column():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy)
    snapshots = observed_steps(instruments, model)
    final = instruments.finish()
    columns = [name for collector in instruments.collectors for name in collector.columns(final=True)]
    assert sorted(columns) == sorted(final)  # no column twice: the merge would have failed
    assert set(final) <= set(SCHEMA.names)
    scores = {"final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc"}  # the loop adds these
    assert set(snapshots[-1]) | scores == set(CHECKPOINT_COLUMNS)


def test_two_collectors_measuring_one_column_fail_loudly():
    class SecondLoss(Collector):
        def columns(self, final: bool) -> dict:
            return {"first_loss": 0.0}

    model = nn.Linear(4, 3)
    instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy)
    instruments.collectors.append(SecondLoss())
    with pytest.raises(RuntimeError, match="'first_loss' is measured by both LossCurves and SecondLoss"):
        observed_steps(instruments, model, steps=1)


def test_update_ratio_reads_weight_matrices_and_not_a_bias_that_started_at_zero():
    # SGD at rate 0.1 on one Linear(2, 1) whose weight is [[1, 0]] and bias 0: x = [[1, 0]], y = 0, MSE.
    # Output 1, dL/dout = 2, so the step moves the weight by [[-0.2, 0]] (ratio 0.2) and the bias by -0.2 from
    # 0 (no size: NaN). At the second step the output is 0.8 - 0.2 = 0.6: the weight moves 0.12 of 0.8 (0.15)
    # and the bias 0.12 of 0.2, a ratio of 0.6 that says nothing about the rate. The curve and the median must
    # read the weight alone.
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0]]))
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.mse_loss, census_every=1)
    batch = (torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0]]))
    for x, y in instruments.watch([batch] * 2):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    m = instruments.finish()
    assert m["update_ratio_curve"] == pytest.approx([0.2, 0.15])
    assert m["update_ratio_peak"] == pytest.approx(0.2)
    assert m["update_ratio_median"] == pytest.approx(0.175)
    assert m["update_ratio"][1] == pytest.approx(0.6)  # the bias's own ratio is still kept, per parameter


def test_update_ratio_reads_every_parameter_when_the_model_has_no_matrix():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return x * self.w

    model = Scale()  # one 1-D weight: the model has no matrix
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.mse_loss, census_every=1)
    for x, y in instruments.watch([(torch.ones(1, 1), torch.zeros(1, 1))]):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    assert instruments.finish()["update_ratio_peak"] == pytest.approx(0.2)  # dL/dw = 2: 1 -> 0.8


def run_loop(
    batches_per_step: int, zero: str, scale: float = 1.0, steps: int = 12, census_every: int = 50, flat: bool = False
):
    """A Linear(4, 3) loop of `steps` batches: a step every `batches_per_step`, with .grad cleared as `zero` says.

    zero: "each step" (after every optimizer step, set_to_none), "zeros" (zero_grad(set_to_none=False) before the
    first batch of a step), "data" (p.grad.data.zero_() there instead, as old code does: unseen by the version
    counter), "never", or "every batch" (before each backward: accumulation broken the other way).
    flat: after the first backward every .grad becomes a view of one flat buffer (as DDP's bucket views are).
    """
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=census_every)
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(steps)]
    for i, (x, y) in enumerate(instruments.watch(data)):
        if zero == "zeros" and i % batches_per_step == 0:
            optimizer.zero_grad(set_to_none=False)
        if zero == "data" and i % batches_per_step == 0 and i:
            for param in model.parameters():
                param.grad.data.zero_()
        if zero == "every batch":
            optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        (loss * scale).backward()
        if flat and i == 0:
            buffer = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            sizes = [p.numel() for p in model.parameters()]
            for param, view in zip(model.parameters(), buffer.split(sizes), strict=True):
                param.grad = view.view_as(param)
        instruments.after_backward(loss)
        if (i + 1) % batches_per_step == 0:
            optimizer.step()
            if zero == "each step":
                optimizer.zero_grad(set_to_none=True)
    return instruments.finish()


@pytest.mark.parametrize("flat", [False, True], ids=["grads", "flat-buffer-views"])
@pytest.mark.parametrize("scale", [1.0, 0.25, 100.0])
@pytest.mark.parametrize("zero", ["each step", "zeros", "data"])
@pytest.mark.parametrize("batches_per_step", [1, 4])
def test_gradients_cleared_after_every_optimizer_step_are_carried_over_none(batches_per_step, zero, scale, flat):
    m = run_loop(batches_per_step, zero, scale, flat=flat)
    assert m["backwards_per_step"] == batches_per_step and m["optimizer_steps"] == 12 // batches_per_step
    assert m["grad_carried_share"] == 0.0


@pytest.mark.parametrize("flat", [False, True], ids=["grads", "flat-buffer-views"])
@pytest.mark.parametrize("scale", [1.0, 0.25])
@pytest.mark.parametrize("batches_per_step", [1, 4])
def test_gradients_never_cleared_are_carried_over_at_every_step_whatever_the_loss_scale(batches_per_step, scale, flat):
    m = run_loop(batches_per_step, "never", scale, steps=24, flat=flat)
    # Each step after the first found last step's .grad. Read after backward, a gradient only added to since the
    # step may have been zeroed unseen (the "data" loop): the hook reads it exactly from the next step on.
    assert m["grad_carried_share"] == 1.0


@pytest.mark.parametrize("every", [2, 3])
def test_gradients_cleared_every_few_steps_are_carried_over_at_the_others(every):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy)
    for i, (x, y) in enumerate(instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(31)])):
        if i % every == 0:
            optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    # 30 steps after the first were read; the first one only added to (step 1) is read again by the hook. Of the
    # 29 read, those that zeroed first (i = every, 2 every, ...) found nothing carried.
    read = list(range(2, 31))
    cleared = [i for i in read if i % every == 0]
    assert instruments.finish()["grad_carried_share"] == pytest.approx(1 - len(cleared) / len(read))


def test_a_parameter_the_optimizer_does_not_hold_is_unmoved_not_carried():
    # An output map copied after the optimizer was made (the LM fault tied_weights_broken): backward reaches the
    # copy first, zero_grad never clears it, and no step moves it. The loop clears what it steps.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    for x, y in instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(12)]):
        one_step(model, instruments, x, y)
    m = instruments.finish()
    assert model[2].weight.grad.ne(0).any()  # the copy's gradient piled up
    assert m["grad_carried_share"] == 0.0
    assert m["unmoved_share"] == pytest.approx((8 * 3 + 3) / (4 * 8 + 8 + 8 * 3 + 3))  # the second layer's elements


def test_zeroing_before_every_backward_of_an_accumulation_carries_nothing_over():
    # It is a different bug (each step follows only the last batch), not one of gradients carried across steps.
    assert run_loop(4, "every batch")["grad_carried_share"] == 0.0


def test_update_ratios_are_read_on_optimizer_steps_whatever_the_census_cadence():
    # Census at batches 0, 1, 2, 4, 8; optimizer steps after batches 3, 7, 11: the census's own batch is never
    # one a step follows, yet every census gets the ratio of the next step (batches 1 and 2 share step 3's).
    m = run_loop(4, "each step", census_every=50)
    assert m["census_steps"] == [0, 1, 2, 4, 8]
    assert len(m["update_ratio_curve"]) == 3 and all(r > 0 for r in m["update_ratio_curve"])


def standard_loop(scaler=None, clip=0.0, clip_scaled=False, unscale_first=False, loss_factor=1.0, warmup=0, steps=6):
    """A Linear(4, 3) SGD loop with the standard pieces: a GradScaler, clip_grad_norm_, a warmup; census every step.

    clip_scaled: clip before scaler.unscale_ (the bug); unscale_first: unscale_ before after_backward is called.
    """
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup)) if warmup else None
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1, scaler=scaler)
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(steps)]
    for x, y in instruments.watch(data):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y) * loss_factor
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if unscale_first:
            scaler.unscale_(optimizer)
        instruments.after_backward(loss)
        clip_and_step(model, optimizer, scaler, clip, unscale=not (clip_scaled or unscale_first))
        if schedule is not None:
            schedule.step()
    return instruments.finish()


@pytest.mark.parametrize("unscale_first", [False, True])
def test_a_grad_scaler_is_read_through_its_scale(unscale_first):
    plain, scaled = standard_loop(), standard_loop(torch.amp.GradScaler("cpu"), unscale_first=unscale_first)
    assert scaled["grad_norm_curve"] == pytest.approx(plain["grad_norm_curve"], rel=1e-5)  # not 65536 times larger
    assert scaled["update_ratio_curve"] == pytest.approx(plain["update_ratio_curve"], rel=1e-5)
    assert scaled["grad_kept_at_step"] == pytest.approx(1.0) and scaled["clipped_step_share"] == 0.0
    assert (scaled["amp_scale_min"], scaled["amp_scale_last"], scaled["amp_skipped_share"]) == (65536.0, 65536.0, 0.0)
    assert math.isnan(plain["amp_scale_last"]) and math.isnan(plain["amp_skipped_share"])


def test_steps_a_grad_scaler_skips_are_counted_by_its_halving_scale():
    # Gradients overflow float32 once scaled (1e36 x 65536): every step is skipped and the scale halves each time.
    m = standard_loop(torch.amp.GradScaler("cpu"), loss_factor=1e36)
    assert m["optimizer_steps"] == 0 and m["amp_skipped_share"] == 1.0
    assert (m["amp_scale_min"], m["amp_scale_last"]) == (65536.0 / 2**6, 65536.0 / 2**6)


def test_clipping_known_answers():
    plain = standard_loop()
    assert plain["grad_kept_at_step"] == 1.0 and plain["clipped_step_share"] == 0.0
    clipped = standard_loop(clip=1e-3)  # every step cut to norm 1e-3: kept 1e-3 / the norm after backward
    expected = [1e-3 / n for n in clipped["grad_norm_curve"]]
    assert clipped["grad_kept_at_step"] == pytest.approx(statistics.median(expected), rel=1e-4)
    assert clipped["clipped_step_share"] == 1.0
    loose = standard_loop(clip=1e6)
    assert loose["grad_kept_at_step"] == 1.0 and loose["clipped_step_share"] == 0.0


def closure_loop(clip=0.0, steps=6, keyword=True):
    """The loop of standard_loop as optimizer.step(closure) runs it (LBFGS, Lightning): all of it inside the step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    for x, y in instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(steps)]):

        def closure(x=x, y=y):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            instruments.after_backward(loss)
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            return loss

        optimizer.step(closure=closure) if keyword else optimizer.step(closure)
    return instruments.finish()


@pytest.mark.parametrize("keyword", [True, False])
def test_a_step_that_runs_its_closure_is_read_after_the_closure_as_a_plain_loop(keyword):
    # The step's pre-hook runs before the closure's forward and backward: read there, nothing would be clipped yet.
    for clip in (0.0, 1e-3):
        plain, inside = standard_loop(clip=clip), closure_loop(clip=clip, keyword=keyword)
        for key in ("grad_kept_at_step", "clipped_step_share", "update_ratio_median", "backwards_per_step"):
            assert inside[key] == pytest.approx(plain[key], rel=1e-6), (clip, key)
        assert inside["grad_carried_share"] == plain["grad_carried_share"] == 0.0


def test_clipping_before_unscale_keeps_a_scale_th_of_the_clipped_norm():
    right = standard_loop(torch.amp.GradScaler("cpu"), clip=1.0)
    wrong = standard_loop(torch.amp.GradScaler("cpu"), clip=1.0, clip_scaled=True)
    assert right["clipped_step_share"] == 0.0  # unscaled, these gradients are well under norm 1
    expected = [1.0 / (65536 * n) for n in wrong["grad_norm_curve"]]
    assert wrong["grad_kept_at_step"] == pytest.approx(statistics.median(expected), rel=1e-4)
    assert wrong["clipped_step_share"] == 1.0


def test_the_rate_is_read_against_the_one_the_optimizer_was_built_with():
    plain, warming = standard_loop(), standard_loop(warmup=10)  # 6 steps at 0.1, 0.2, ... 0.6 of the rate
    assert (plain["lr_built"], plain["lr_peak_share"], plain["lr_last_share"]) == (0.1, 1.0, 1.0)
    assert warming["lr_built"] == 0.1
    assert warming["lr_peak_share"] == pytest.approx(0.6) and warming["lr_last_share"] == pytest.approx(0.6)


def label_mix(batches_of_labels, n_classes=4):
    model = nn.Linear(2, n_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy)
    for x, y in instruments.watch([(torch.randn(len(y), 2), torch.tensor(y)) for y in batches_of_labels]):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    return instruments.finish()["batch_label_mix"]


def test_batch_label_mix_known_answers():
    torch.manual_seed(0)
    one_class_each = [[c] * 16 for c in range(4)] * 20  # class-sorted data: every batch holds one class
    assert label_mix(one_class_each) == 0.0
    shuffled = torch.randint(0, 4, (80, 16)).tolist()
    assert label_mix(shuffled) == pytest.approx(1.0, abs=0.05)
    # An imbalanced set, shuffled: both entropies are lower, the ratio is still about 1.
    imbalanced = (torch.rand(80, 16) < 0.1).long().tolist()
    assert label_mix(imbalanced, n_classes=2) == pytest.approx(1.0, abs=0.1)
    two_classes_each = [[c] * 8 + [c + 1] * 8 for c in (0, 2)] * 40  # ln 2 of a shuffled batch's ~ln 4
    assert 0.4 < label_mix(two_classes_each) < 0.6
    assert math.isnan(label_mix([[0]] * 40))  # batches of one example: a shuffled one has no entropy either


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
    assert (share, layers) == (0.0, [0.0])  # each channel normalized over the batch: some of it is always positive
    assert torch.equal(model[1].running_mean, before) and model.training


def test_data_wait_share_sees_a_slow_iterator():
    def slow(n, pause):
        for _ in range(n):
            time.sleep(pause)
            yield torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)

    for pause, low, high in [(0.05, 0.7, 1.0), (0.0, 0.0, 0.5)]:  # the early steps carry dense censuses
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


def test_activation_census_known_answers():
    saturating = nn.Sequential(nn.Linear(1, 2), nn.Tanh(), nn.Linear(2, 2), nn.Sigmoid())
    with torch.no_grad():
        saturating[0].weight.copy_(torch.tensor([[100.0], [0.0]]))  # unit 0 saturates, unit 1 sits at tanh(0) = 0
        saturating[0].bias.zero_()
        saturating[2].weight.zero_()
        saturating[2].bias.zero_()  # sigmoid(0) = 0.5: not saturated
    census = activation_census(saturating, torch.tensor([[1.0], [-1.0]]))
    assert census["saturated"] == pytest.approx(2 / 8) and math.isnan(census["dead"])
    growing = nn.Sequential(nn.Linear(1, 1, bias=False), nn.ReLU(), nn.Linear(1, 1, bias=False), nn.ReLU())
    with torch.no_grad():
        growing[0].weight.fill_(1.0)
        growing[2].weight.fill_(8.0)
    assert activation_census(growing, torch.tensor([[1.0], [2.0]]))["growth"] == pytest.approx(8.0)


def test_spikes_are_found_once_each_and_their_period_is_counted():
    losses = [1.0] + [0.05] * 199
    for step in (40, 41, 70, 100, 130, 175):  # 40 and 41 are one spike
        losses[step] = 2.0
    found = spikes(losses)
    assert found == [40, 70, 100, 130, 175]
    assert periodicity(found) == (30.0, 3)
    noisy = [1.0] + [0.05 + 0.04 * (i % 3) for i in range(199)]  # jitter of a small loss is no spike
    assert spikes(noisy) == []
    plateau = [2.3] + [1.5 + 0.01 * (i % 2) for i in range(199)]  # a loss stuck high still shows its spikes
    plateau[60] = plateau[90] = 2.2
    assert spikes(plateau) == [60, 90]
    period, count = periodicity([])
    assert math.isnan(period) and count == 0


def test_mode_and_output_checks_see_only_the_model_and_its_forwards():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3), nn.Softmax(dim=1))
    optimizer = torch.optim.Adam(model.parameters())
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    batch = (torch.randn(16, 4), torch.tensor([0] * 12 + [1] * 3 + [2]))
    model.train()
    for x, y in instruments.watch([batch] * 3):
        one_step(model, instruments, x, y)
        with torch.no_grad():
            model(x)  # a validation forward left in training mode
    m = instruments.finish()
    assert m["output_prob_share"] == 1.0
    assert m["eval_in_train_share"] == 1.0 and m["train_in_eval_share"] == 0.0
    assert m["label_imbalance"] == 12.0
    assert m["input_rms"] == pytest.approx(float(batch[0].pow(2).mean().sqrt()))


@pytest.mark.parametrize(
    ("layer", "acts"),
    [
        (nn.Dropout(0.0), False),  # returns its input in both modes: a transformer built with dropout 0 keeps these
        (nn.Dropout(0.1), True),
        (nn.Dropout1d(0.5), True),  # every dropout kind, not nn.Dropout alone
        (nn.AlphaDropout(0.2), True),
        (nn.BatchNorm1d(8), True),
        (nn.LayerNorm(8), False),
    ],
)
def test_mode_check_hooks_only_models_whose_layers_act_by_mode(layer, acts):
    model = nn.Sequential(nn.Linear(4, 8), layer, nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    batch = (torch.randn(16, 4), torch.randint(0, 3, (16,)))
    model.eval()  # every training forward in eval mode: the fault where the mode matters
    for x, y in instruments.watch([batch] * 2):
        one_step(model, instruments, x, y)
    assert instruments.finish()["train_in_eval_share"] == (1.0 if acts else 0.0)


def test_confident_disagreement_counts_the_labels_the_model_contradicts():
    model = nn.Linear(2, 3)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([10.0, 0.0, 0.0]))  # class 0 first, the others get p < 1e-4
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1)
    batch = (torch.zeros(4, 2), torch.tensor([0, 0, 1, 2]))
    for x, y in instruments.watch([batch] * 4):
        one_step(model, instruments, x, y)
    assert instruments.finish()["confident_disagreement"] == 0.5


def test_between_censuses_a_loop_that_clears_its_gradients_runs_without_the_instruments_hooks():
    # What keeps the doctor cheap on tiny steps: no Python hook in each backward (an emptied hook table still costs
    # one) and none on the model's output but on the forward of a census step.
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=50)
    hooked = []
    for x, y in instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 40):
        hooked.append((bool(model._forward_hooks), [p._backward_hooks is not None for p in model.parameters()]))
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    assert [step for step, (output, _) in enumerate(hooked) if output] == [0, 1, 2, 4, 8, 16, 32]
    assert hooked[0][1] == [True, True] and all(not any(grads) for _, grads in hooked[1:])
    assert instruments.finish()["grad_carried_share"] == 0.0 and not model._forward_hooks


class FirstStepBias(nn.Module):
    """A Linear(4, 3) with a bias of its own added on the first forward only: its gradient stops after step 0."""

    def __init__(self):
        super().__init__()
        self.linear, self.extra, self.forwards = nn.Linear(4, 3), nn.Parameter(torch.zeros(3)), 0

    def forward(self, x):
        self.forwards += 1
        return self.linear(x) + self.extra if self.forwards == 1 else self.linear(x)


@pytest.mark.parametrize(("zero", "carried"), [("each step", 0.0), ("never", 1.0)])
def test_a_parameter_whose_gradient_stops_is_replaced_by_one_that_gets_one(zero, carried):
    torch.manual_seed(0)
    model = FirstStepBias()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy)
    for x, y in instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(24)]):
        if zero == "each step":
            optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    m = instruments.finish()
    assert m["grad_carried_share"] == carried and instruments.checked_steps >= 20
