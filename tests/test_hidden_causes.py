"""The four causes that hid behind model_too_small, each read on a healthy twin and a faulty loop.

A schedule that kills the rate early (lr_decayed_share), weight decay that dominates the update
(weight_norm_ratio), an optimizer that holds other tensors than the trained model's (unmoved_share) and targets
changed between the batch and the loss (targets_changed_share): the instruments on small loops written here,
and the rules on hand-made records (a fault that did no harm is a warning, not the verdict).
"""

import math

import pytest
import torch
from hand_records import FELL_SHORT, PLANTED, THRESHOLDS, record
from torch import nn

from analysis.rules import HEALTHY, RULES, VERDICTS, WARNING, diagnose
from harness.cell import optimized_params, permuted_rows, rate_factor
from harness.instruments import Instruments
from harness.instruments.loss_targets import rows_changed

NEW = ("rate_decayed_early", "weight_decay_dominates", "params_not_updated", "targets_changed_in_loop")


def small_loop(
    steps=60,
    make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
    schedule=None,
    rebuilt=False,
    change_targets=None,
    loss_fn=None,
    regression=False,
    census_every=10,
):
    """A 2-layer MLP on a separable 3-class problem (or a regression), observed by the instruments."""
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = x[:, :3].sum(dim=1, keepdim=True) if regression else x[:, :3].argmax(dim=1)
    make = lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1 if regression else 3))  # noqa: E731
    model = make()
    optimizer = make_optimizer(model.parameters())
    if rebuilt:
        model = make()  # the model rebuilt after its optimizer was made
    scheduler = schedule(optimizer) if schedule else None
    loss_fn = loss_fn if loss_fn is not None else (nn.MSELoss() if regression else nn.CrossEntropyLoss())
    instruments = Instruments(model, optimizer, loss_fn, census_every=census_every)
    batches = ((x[i : i + 32], y[i : i + 32]) for step in range(steps) for i in [32 * (step % 16)])
    for xb, yb in instruments.watch(batches):
        if change_targets is not None:
            yb = change_targets(yb)
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return instruments.finish()


# ----- a schedule that kills the rate early -------------------------------------------------------------------
def test_a_per_epoch_decay_stepped_per_batch_runs_most_steps_at_a_dead_rate():
    constant = small_loop()
    cosine = small_loop(schedule=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=60))
    per_batch = small_loop(schedule=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=10, gamma=0.1))
    assert constant["lr_decayed_share"] == 0.0
    assert 0.05 < cosine["lr_decayed_share"] < 0.2  # a cosine spends only its last seventh under 5% of its peak
    assert per_batch["lr_decayed_share"] == pytest.approx(40 / 60)  # under 5% from step 20 (1% of the rate) on


def test_a_warmup_is_not_a_decayed_rate():
    warming = small_loop(schedule=lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: (s + 1) / 1000))
    assert warming["lr_decayed_share"] == 0.0 and warming["lr_peak_share"] < 0.1


def test_the_grid_schedule_combines_warmup_decay_and_cosine():
    assert rate_factor(0, 0, False, 600) is None
    halving = rate_factor(0, 40, False, 600)
    assert halving(0) == 1.0 and halving(40) == pytest.approx(0.5) and halving(173) < 0.05
    cosine = rate_factor(0, 0, True, 600)
    assert cosine(0) == 1.0 and cosine(300) == pytest.approx(0.5) and cosine(600) == pytest.approx(0.0)
    warm = rate_factor(10, 0, False, 600)
    assert warm(0) == pytest.approx(0.1) and warm(9) == 1.0


# ----- weight decay that dominates the update ----------------------------------------------------------------
def test_weight_decay_that_dominates_shrinks_the_weights_an_ordinary_one_does_not():
    plain = small_loop()
    ordinary = small_loop(make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01))
    dominating = small_loop(make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=50.0))
    assert plain["weight_norm_ratio"] > 0.95 and ordinary["weight_norm_ratio"] > 0.95
    assert dominating["weight_norm_ratio"] < 0.2  # 5% per step: under 0.95^50 by the last census


# ----- parameters that never move ----------------------------------------------------------------------------
def test_a_model_rebuilt_after_its_optimizer_never_moves_although_it_gets_gradients():
    healthy, rebuilt = small_loop(), small_loop(rebuilt=True)
    assert healthy["unmoved_share"] == 0.0
    assert rebuilt["unmoved_share"] == 1.0 and rebuilt["params_without_grad_share"] == 0.0
    assert rebuilt["weight_norm_ratio"] == 1.0  # the trained model is still its initialization


def test_frozen_parameters_are_not_read_as_unmoved():
    def freeze_first(params):
        params = list(params)
        params[0].requires_grad_(False), params[1].requires_grad_(False)
        return torch.optim.SGD(params, lr=0.1)

    frozen = small_loop(make_optimizer=freeze_first)
    assert frozen["unmoved_share"] == 0.0 and frozen["params_without_grad_share"] > 0.5


def test_the_grid_gives_the_optimizer_copies_of_a_share_of_the_parameters():
    make = lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))  # noqa: E731
    model = make()
    own = list(model.parameters())
    assert optimized_params(model, make, 0.0, torch.device("cpu")) == own
    half = optimized_params(model, make, 0.5, torch.device("cpu"))
    assert [p is q for p, q in zip(half, own, strict=True)] == [False, False, True, True]


# ----- targets changed between the batch and the loss ---------------------------------------------------------
def test_targets_permuted_inside_the_loop_are_read_at_the_loss():
    healthy = small_loop()
    permuted = small_loop(change_targets=lambda y: y[torch.randperm(len(y))])
    assert healthy["targets_changed_share"] == 0.0
    assert permuted["targets_changed_share"] > 0.5  # a random permutation keeps a third of 3 classes in place


@pytest.mark.parametrize(
    "change",
    [
        lambda y: nn.functional.one_hot(y, 3).float(),  # one-hot rows built inside the loop
        lambda y: nn.functional.one_hot(y, 3).float() * 0.9 + 0.1 / 3,  # smoothed by hand
        lambda y: y.clone(),
    ],
    ids=["one-hot", "smoothed", "copied"],
)
def test_a_change_of_encoding_is_not_a_change_of_targets(change):
    assert small_loop(change_targets=change)["targets_changed_share"] == 0.0


def test_regression_targets_are_read_by_rank_a_rescaling_is_no_change():
    rescaled = small_loop(regression=True, change_targets=lambda y: (y - 0.5) * 3.0)
    permuted = small_loop(regression=True, change_targets=lambda y: y.flip(0))
    assert rescaled["targets_changed_share"] == 0.0 and permuted["targets_changed_share"] > 0.9


def test_a_loss_that_is_a_plain_function_leaves_the_targets_unmeasured():
    assert math.isnan(small_loop(loss_fn=nn.functional.cross_entropy)["targets_changed_share"])


def test_rows_that_do_not_pair_are_not_compared():
    assert rows_changed(torch.arange(6), torch.arange(4)) is None
    assert rows_changed(torch.tensor([0, 1, 1]), torch.tensor([[1.0], [0.0], [1.0]])).tolist() == [True, True, False]


def test_the_grid_permutes_a_share_of_the_rows_and_every_permuted_row_moves():
    y = torch.arange(10)
    assert torch.equal(permuted_rows(y, 0.0), y)
    assert (permuted_rows(y, 1.0) != y).all() and (permuted_rows(y, 0.5)[5:] == y[5:]).all()


# ----- the rules: failing with harm, a warning without, and the advice -----------------------------------------
@pytest.mark.parametrize("verdict", NEW)
def test_each_new_check_fails_a_run_that_fell_short_and_warns_on_one_that_learned(verdict):
    assert VERDICTS[verdict].needs_harm
    fell_short = diagnose(record(**PLANTED[verdict]), RULES, THRESHOLDS)
    assert fell_short[0].verdict == verdict, fell_short
    learned = {k: v for k, v in PLANTED[verdict].items() if k not in FELL_SHORT}
    findings = diagnose(record(**learned), RULES, THRESHOLDS)
    assert findings[0].verdict == HEALTHY
    assert [(f.verdict, f.kind) for f in findings[1:]] == [(verdict, WARNING)], findings


def test_parameters_that_never_move_are_named_before_the_gradients_they_pile_up():
    # The optimizer holds other tensors: nothing moves, and the model's .grad piles up, since the optimizer's
    # zero_grad clears the other tensors: no_zero_grad's reading is true too, and comes second.
    nothing_moves = {"unmoved_share": 1.0, "grad_carried_share": 1.0, "update_ratio_peak": 0.0, **FELL_SHORT}
    findings = diagnose(record(**nothing_moves), RULES, THRESHOLDS)
    assert [f.verdict for f in findings][:2] == ["params_not_updated", "no_zero_grad"]


@pytest.mark.parametrize("verdict", NEW)
def test_the_new_causes_advise_their_own_fix_not_more_capacity(verdict):
    finding = diagnose(record(**PLANTED[verdict]), RULES, THRESHOLDS)[0]
    assert "capacity" not in finding.next_step and "wider" not in finding.next_step
    words = {
        "rate_decayed_early": "scheduler.step()",
        "weight_decay_dominates": "weight_decay",
        "params_not_updated": "optimizer",
        "targets_changed_in_loop": "targets",
    }
    assert words[verdict] in finding.next_step and "nan" not in finding.evidence
