"""Every fault runs to an ok record on every dataset and really plants its mechanism.

The healthy recipe learns both datasets well.
"""

import functools
import math

import numpy as np
import pytest
import torch
from conftest import CLASS_DATASETS, FAULTS, LM, LM_FAULTS, SHORT, SIZES, make_config

from harness.cell import run_cell
from harness.columns import DECLARED_IN
from harness.data import load_splits, training_batches
from harness.model import build_model
from harness.recipe import recipe_changes
from harness.records import SCHEMA

_runs: dict[tuple[str, str], dict] = {}


def short_run(fault: str, dataset: str) -> dict:
    """One short cell per (fault, dataset), shared by the tests below."""
    if (fault, dataset) not in _runs:
        _runs[fault, dataset] = run_cell(make_config(*SHORT, f"fault={fault}", f"dataset={dataset}"))
    return _runs[fault, dataset]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", CLASS_DATASETS)
@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_gives_an_ok_record_with_every_measurement(fault, dataset):
    record = short_run(fault, dataset)
    assert record["status"] == "ok", record["error"]
    assert set(record) == set(SCHEMA.names)
    empty = [name for name, value in record.items() if value is None and name != "error"]
    assert not empty, f"measurements missing: {empty}"
    assert (record["fault"], record["dataset"], record["diagnosis"]) == (
        fault,
        dataset,
        make_config(f"fault={fault}").fault[fault],
    )
    assert len(record["train_loss_curve"]) == 40 and record["val_steps"] == [0, 20, 40]


# Not what a run measures: what it is, and when and where it ran (harness/cell.py), and the wall-clock timings
# (harness/timing.py, the loader's wait), which move from run to run by themselves.
NOT_MEASURED = {name for name, where in DECLARED_IN.items() if where in ("harness/cell.py", "harness/timing.py")}
TIMED = {"data_wait_s", "loop_s", "data_wait_share"}
NOT_MEASURED = (NOT_MEASURED - {"n_train", "n_val", "n_classes", "steps"}) | {"checkpoints"}


def moved(record: dict, healthy: dict) -> list[str]:
    """The measurements a run moved from the healthy run's: exactly, or a timing by more than 3x."""
    found = []
    for name, value in record.items():
        if name in NOT_MEASURED:
            continue
        other = healthy[name]
        if name in TIMED:
            if value is not None and other and not (1 / 3 < value / other < 3):
                found.append(name)
        elif not _same(value, other):
            found.append(name)
    return found


def _same(a, b) -> bool:
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (
            a is not None and b is not None and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# Healthy controls whose change no instrument should tell apart from the healthy run: that is what they show.
MEASURED_ALIKE = {
    "healthy_zeroed_grads": "zero_grad(set_to_none=False) hands the optimizer the same gradients as set_to_none=True",
}
# The loop alone says whether a knob acts: the fits of fresh models are left out of these runs (0 steps: not run).
NO_FITS = ["memorize.steps=0", "capacity.steps=0"]
LM_BRIEF = ["loop.steps=12", "loop.eval_every=6", "loop.census_every=3", *NO_FITS]  # deep LM cells cost minutes


@functools.cache  # the healthy run is every fault's comparison
def run_with_its_own_knobs(fault: str, short: tuple[str, ...], *family: str) -> dict:
    """A run of the fault, where the fault's own knobs win over the shortening's (still_improving sets steps)."""
    _, changes = recipe_changes(make_config(*family, f"fault={fault}"))
    kept = [o for o in short if o.split("=")[0] not in changes]
    if kept == SHORT and family == ("dataset=digits",):  # the run the tests above share: not run twice
        return short_run(fault, "digits")
    return run_cell(make_config(*kept, *family, f"fault={fault}"))


def knob_acts(fault: str, short: tuple[str, ...], *family: str) -> list[str]:
    """The measurements the fault moves away from the healthy run's: short first, else at the recipe's own length.

    A bad batch every 60 steps acts only after the short run's 40.
    """
    _, changes = recipe_changes(make_config(*family, f"fault={fault}"))
    assert {key for key in changes if not key.startswith("fault.")}, "the fault file changes no knob"
    for shortening in (short, tuple(NO_FITS)):
        record, healthy = (
            run_with_its_own_knobs(fault, shortening, *family),
            run_with_its_own_knobs("healthy", shortening, *family),
        )
        assert record["status"] == "ok", record["error"]
        if moved(record, healthy):
            return moved(record, healthy)
    return []


@pytest.mark.slow
@pytest.mark.parametrize("fault", [f for f in FAULTS + SIZES if f != "healthy" and f not in MEASURED_ALIKE])
def test_every_fault_file_at_every_size_changes_the_recipe_and_what_the_run_measures(fault):
    # The trap: a knob the code never reads swept "ok" under the fault's label, wrong ground truth for `make fit`.
    assert knob_acts(fault, tuple(SHORT), "dataset=digits"), f"{fault} measures what the healthy run does"


@pytest.mark.slow
@pytest.mark.parametrize("fault", LM_FAULTS)  # their mild and extreme sizes set the same knobs
def test_every_language_model_fault_changes_what_the_run_measures(fault):
    assert knob_acts(fault, tuple(LM_BRIEF), *LM), f"{fault} measures what the healthy run does"


# What each planted fault does to the measurement it is documented to move, against the healthy run.
@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_no_zero_grad_accumulates_gradients(dataset):
    assert short_run("healthy", dataset)["accumulation_ratio"] == pytest.approx(1.0)
    assert short_run("no_zero_grad", dataset)["accumulation_ratio"] > 3.0
    assert short_run("healthy", dataset)["grad_carried_share"] == 0.0
    assert short_run("no_zero_grad", dataset)["grad_carried_share"] == 1.0


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_accumulation_on_purpose_carries_nothing_across_steps_and_forgotten_zeroing_carries_everything(dataset):
    on_purpose, forgotten = short_run("healthy_accumulation", dataset), short_run("accumulation_never_zeroed", dataset)
    for record in (on_purpose, forgotten):  # 40 batches, 4 per optimizer step
        assert record["backwards_per_step"] == 4.0 and record["optimizer_steps"] == 10
        assert record["update_ratio_peak"] > 0  # measured on optimizer steps, though census steps seldom are one
    assert on_purpose["grad_carried_share"] == 0.0
    assert forgotten["grad_carried_share"] == 1.0


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_gradients_zeroed_in_place_carry_nothing_across_steps(dataset):
    assert short_run("healthy_zeroed_grads", dataset)["grad_carried_share"] == 0.0


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_mixed_precision_is_read_unscaled_and_clipping_before_unscale_cuts_every_step(dataset):
    plain, amp = short_run("healthy", dataset), short_run("healthy_amp", dataset)
    wrong = short_run("amp_clip_before_unscale", dataset)
    assert math.isnan(plain["amp_scale_last"])
    for record in (amp, wrong):
        assert record["amp_scale_last"] == 65536.0 and record["amp_skipped_share"] == 0.0
    # The census reads the gradients as the optimizer gets them: as large as without mixed precision (bfloat16's
    # rounding aside), not 65536 times larger.
    assert amp["grad_norm_curve"][0] == pytest.approx(plain["grad_norm_curve"][0], rel=0.05)
    assert amp["grad_kept_at_step"] > 0.3
    assert wrong["grad_kept_at_step"] < 1e-3 and wrong["clipped_step_share"] == 1.0


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_clipping_control_cuts_some_steps_by_a_modest_factor(dataset):
    plain, clipped = short_run("healthy", dataset), short_run("healthy_clipping", dataset)
    assert (plain["grad_kept_at_step"], plain["clipped_step_share"]) == (1.0, 0.0)
    assert clipped["clipped_step_share"] > 0 and 0.1 < clipped["grad_kept_at_step"] <= 1.0


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_a_warmup_that_ends_reaches_the_rate_and_one_that_never_ends_does_not(dataset):
    # 40 steps: a warmup of 60 steps reaches 40/60 of the rate by then, one of 60 000 steps 40/60 000.
    assert short_run("healthy", dataset)["lr_peak_share"] == 1.0
    assert short_run("healthy_warmup", dataset)["lr_peak_share"] == pytest.approx(40 / 60)
    assert short_run("warmup_never_ends", dataset)["lr_peak_share"] == pytest.approx(40 / 60000)


@pytest.mark.slow  # three runs per dataset (about 3 s)
@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_the_causes_that_hid_behind_a_model_too_small_plant_what_their_checks_read(dataset):
    healthy = short_run("healthy", dataset)
    assert (healthy["lr_decayed_share"], healthy["unmoved_share"], healthy["targets_changed_share"]) == (0, 0, 0)
    # 40 steps: a half-life of 40 steps stays above 5% of the rate; the cosine's last seventh falls under it
    assert short_run("rate_decayed_early", dataset)["lr_decayed_share"] == 0.0
    assert 0.05 < short_run("healthy_cosine_schedule", dataset)["lr_decayed_share"] < 0.2
    assert short_run("extreme/rate_decayed_early", dataset)["lr_last_share"] < 0.1  # 0.5 ** (39 / 10)
    assert short_run("weight_decay_dominates", dataset)["weight_norm_ratio"] < 0.9 * healthy["weight_norm_ratio"]
    assert short_run("params_not_updated", dataset)["unmoved_share"] == 1.0
    assert 0.0 < short_run("mild/params_not_updated", dataset)["unmoved_share"] < 1.0
    assert short_run("targets_changed_in_loop", dataset)["targets_changed_share"] > 0.5


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_class_sorted_batches_hold_few_classes_and_a_fixed_order_as_many_as_shuffled_ones(dataset):
    assert short_run("healthy", dataset)["batch_label_mix"] == pytest.approx(1.0, abs=0.1)
    assert short_run("healthy_fixed_order", dataset)["batch_label_mix"] == pytest.approx(1.0, abs=0.1)
    assert short_run("class_sorted_batches", dataset)["batch_label_mix"] < 0.3


def test_the_orders_feed_every_example_once_per_epoch():
    x, y = torch.arange(12.0).unsqueeze(1), torch.tensor([2, 0, 1] * 4)
    for order in ("shuffled", "fixed", "class_sorted"):
        batches = training_batches(x, y, 4, seed=0, order=order)
        epochs = [[next(batches) for _ in range(3)] for _ in range(2)]
        for epoch in epochs:
            assert sorted(torch.cat([b[0] for b in epoch]).flatten().tolist()) == list(range(12))
        first, second = (torch.cat([b[0] for b in epoch]).flatten().tolist() for epoch in epochs)
        assert (first == second) == (order != "shuffled")
        if order == "class_sorted":
            assert [b[1].unique().tolist() for b in epochs[0]] == [[0], [1], [2]]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_frozen_params_leave_most_weights_without_gradient(dataset):
    assert short_run("healthy", dataset)["params_without_grad"] == 0
    record = short_run("frozen_params", dataset)
    assert record["params_without_grad"] == 4 and record["params_without_grad_share"] > 0.7


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_starved_loader_waits_most_of_the_time(dataset):
    assert short_run("healthy", dataset)["data_wait_share"] < 0.3
    assert short_run("starved_loader", dataset)["data_wait_share"] > 0.5


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_unscaled_inputs_are_large_and_start_far_above_ln_c(dataset):
    healthy, unscaled = short_run("healthy", dataset), short_run("unscaled_inputs", dataset)
    assert 0.5 < healthy["input_rms"] < 1.5 and unscaled["input_rms"] > 100
    assert abs(healthy["first_loss"] - healthy["ln_classes"]) < 0.5
    assert unscaled["first_loss"] > 4 * unscaled["ln_classes"]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_dead_relu_starts_dead_and_cannot_memorize(dataset):
    assert short_run("healthy", dataset)["dead_unit_share_init"] < 0.1
    record = short_run("dead_relu", dataset)
    assert record["dead_unit_share_init"] > 0.9
    assert record["memorize_best_loss"] > 0.5 * record["ln_classes"]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_learning_rates_move_the_update_ratio(dataset):
    healthy = short_run("healthy", dataset)["update_ratio_median"]
    assert short_run("lr_too_low", dataset)["update_ratio_median"] < healthy / 100
    assert short_run("lr_too_high", dataset)["update_ratio_median"] > healthy * 5


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_a_start_from_zero_biases_reads_the_healthy_rate(dataset):
    # Keras's start: the biases' ratios are about 1 for the first steps whatever the rate; the weights' are not.
    healthy, keras = short_run("healthy", dataset), short_run("healthy_keras_init", dataset)
    assert keras["update_ratio_peak"] < 3 * healthy["update_ratio_peak"]
    assert keras["update_ratio_median"] < 3 * healthy["update_ratio_median"]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_model_too_small_has_a_narrow_hidden_layer(dataset):
    sizes = {f: sum(math.prod(s) for s in _shapes(f, dataset)) for f in ("healthy", "model_too_small")}
    assert sizes["model_too_small"] < sizes["healthy"] / 10


def _shapes(fault, dataset):
    cfg = make_config(f"fault={fault}", f"dataset={dataset}")
    return [p.shape for p in build_model(cfg.model, n_inputs=8, n_classes=10).parameters()]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_shuffled_labels_break_the_link_between_features_and_labels(dataset):
    cfg, shuffled = make_config(f"dataset={dataset}"), make_config(f"dataset={dataset}", "fault=shuffled_labels")
    truth, planted = load_splits(cfg.dataset, cfg.data, 0), load_splits(shuffled.dataset, shuffled.data, 0)
    assert torch.equal(truth.x_train, planted.x_train) and torch.equal(truth.y_val, planted.y_val)
    agreement = (truth.y_train == planted.y_train).float().mean().item()
    assert agreement < 2.0 / truth.n_classes  # about chance, 1/C
    assert sorted(truth.y_train.tolist()) == sorted(planted.y_train.tolist())  # same labels, other order


def test_training_batches_are_reshuffled_and_latency_is_real():
    x, y = torch.arange(10.0).unsqueeze(1), torch.arange(10)
    stream = training_batches(x, y, batch_size=5, seed=0)
    epoch1 = torch.cat([next(stream)[1] for _ in range(2)])
    epoch2 = torch.cat([next(stream)[1] for _ in range(2)])
    assert sorted(epoch1.tolist()) == list(range(10)) and not torch.equal(epoch1, epoch2)
    import time

    slow = training_batches(x, y, batch_size=5, seed=0, stall=lambda: 0.02)
    start = time.perf_counter()
    for _ in range(5):
        next(slow)
    assert time.perf_counter() - start >= 0.1


@pytest.mark.slow
@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_healthy_recipe_reaches_good_validation_accuracy(dataset):
    record = run_cell(make_config(f"dataset={dataset}"))  # the full 600-step recipe
    assert record["status"] == "ok"
    assert record["final_val_acc"] > 0.9
    assert np.isclose(record["first_loss"], record["ln_classes"], atol=0.3)


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_exploding_gradients_grow_the_signal_layer_after_layer(dataset):
    assert short_run("healthy", dataset)["activation_growth_init"] < 2
    record = short_run("exploding_gradients", dataset)
    assert record["activation_growth_init"] > 20 and record["first_loss"] > 10 * record["ln_classes"]


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_vanishing_gradients_starve_the_first_layer(dataset):
    assert short_run("healthy", dataset)["grad_depth_ratio_init"] > 0.1
    assert short_run("vanishing_gradients", dataset)["grad_depth_ratio_init"] < 1e-2


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_saturated_activations_start_near_their_bounds(dataset):
    assert math.isnan(short_run("healthy", dataset)["saturated_share_init"])  # no tanh or sigmoid to saturate
    assert short_run("saturated_activations", dataset)["saturated_share_init"] > 0.3


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_double_softmax_hands_probabilities_to_the_loss(dataset):
    assert short_run("healthy", dataset)["output_prob_share"] == 0
    assert short_run("double_softmax", dataset)["output_prob_share"] == 1
    assert math.isnan(short_run("double_softmax", dataset)["logit_reach_span"])  # rows summing to 1: not this check


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_squashed_logits_keep_the_softmax_losss_inputs_within_1_of_each_other(dataset):
    assert short_run("healthy", dataset)["logit_reach_span"] > 1000  # a linear head, its weights scaled 1000x
    assert short_run("squashed_logits", dataset)["logit_reach_span"] <= 1.0  # a sigmoid: (0, 1) at most


@pytest.mark.slow
@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_wrong_mode_faults_are_seen_in_the_forwards_and_dropout_alone_is_not(dataset):
    control = short_run("healthy_dropout", dataset)
    assert control["eval_in_train_share"] == 0 and control["train_in_eval_share"] == 0
    assert short_run("eval_in_train_mode", dataset)["eval_in_train_share"] == 1
    assert short_run("train_in_eval_mode", dataset)["train_in_eval_share"] == 1
    # Validated at step 20 of 40 and left in eval mode: steps 21 to 40 train in eval mode.
    assert short_run("eval_left_on", dataset)["train_in_eval_share"] == 0.5


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_class_imbalance_shows_in_the_labels_the_loop_sees(dataset):
    assert short_run("healthy", dataset)["label_imbalance"] < 1.6
    assert short_run("class_imbalance", dataset)["label_imbalance"] > 8


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_overfitting_trains_on_a_tenth_of_the_set_with_its_class_mix(dataset):
    healthy, small = _labels(dataset), _labels(dataset, "fault=overfitting")
    assert abs(len(small.y_train) - 0.1 * len(healthy.y_train)) <= healthy.n_classes
    mix = torch.bincount(small.y_train) / len(small.y_train) - torch.bincount(healthy.y_train) / len(healthy.y_train)
    assert mix.abs().max() < 0.02
    assert short_run("overfitting", dataset)["n_train"] == len(small.y_train)


def _labels(dataset, *overrides):
    cfg = make_config(f"dataset={dataset}", *overrides)
    return load_splits(cfg.dataset, cfg.data, 0)


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_label_noise_and_misalignment_change_the_training_labels_only(dataset):
    truth = _labels(dataset)
    noisy, shifted = _labels(dataset, "fault=label_noise"), _labels(dataset, "fault=misaligned_labels")
    agreement = (truth.y_train == noisy.y_train).float().mean().item()
    changed = 0.3 * (1 - 1 / truth.n_classes)  # 30% drawn again from all classes: some land on their own
    assert abs((1 - agreement) - changed) < 0.05
    assert torch.equal(shifted.y_train, torch.roll(truth.y_train, 1))
    assert torch.equal(truth.y_val, noisy.y_val) and torch.equal(truth.y_val, shifted.y_val)


def test_every_kth_batch_is_mislabeled():
    x, y = torch.zeros(64, 1), torch.zeros(64, dtype=torch.long)
    stream = training_batches(x, y, batch_size=8, seed=0, bad_batch_every=3, n_classes=10)
    bad = [bool(next(stream)[1].any()) for _ in range(12)]
    assert bad == [False, False, True] * 4


def test_the_dataloader_feed_serves_the_same_batches_as_indexing():
    x, y = torch.arange(40.0).unsqueeze(1), torch.arange(40) % 4
    indexed = training_batches(x, y, batch_size=8, seed=3)
    loader = training_batches(x, y, batch_size=8, seed=3, kind="dataloader")
    for _ in range(12):  # two and a half epochs
        (xa, ya), (xb, yb) = next(indexed), next(loader)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_the_slow_loaders_stall_is_a_multiple_of_the_steps_own_compute():
    from harness.data import RelativeStall

    stall = RelativeStall(3.0, warmup=2)
    assert stall() == 0.0
    for seconds in (1.0, 1.0, 0.002, 0.004):  # the first two are the warm-up: left out
        stall.record(seconds)
    assert stall() == pytest.approx(3.0 * 0.003)


@pytest.mark.parametrize("dataset", CLASS_DATASETS)
def test_the_too_good_faults_plant_a_leaked_column_validation_copies_and_a_model_that_reads_nothing(dataset):
    healthy = short_run("healthy", dataset)
    assert healthy["altered_input_effect"] > 0.5 and math.isnan(healthy["leak_column_z"])
    # The sequence task's binary inputs repeat now and then (0.3% of validation): far under the fact's tenth.
    assert healthy["val_copy_answered_share"] < 0.01
    assert short_run("ignores_inputs", dataset)["altered_input_effect"] == 0
    leaked = short_run("label_leak", dataset)
    truth = _labels(dataset)
    assert leaked["leak_column"] == truth.x_train.shape[1] and leaked["leak_column_acc"] == 1.0
    assert leaked["leak_column_z"] > 2
    assert short_run("validation_copies", dataset)["val_copy_answered_share"] > 0.2
    copied = _labels(dataset, "fault=validation_copies")
    half = round(0.5 * len(truth.y_val))
    assert torch.equal(copied.x_val[half:], truth.x_val[half:]) and torch.equal(copied.y_val[half:], truth.y_val[half:])
    rows = {tuple(row) for row in truth.x_train.tolist()}
    assert all(tuple(row) in rows for row in copied.x_val[:half].tolist())
