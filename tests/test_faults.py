"""Every fault runs to an ok record on every dataset and really plants its mechanism.

The healthy recipe learns both datasets well.
"""

import math

import numpy as np
import pytest
import torch
from conftest import DATASETS, FAULTS, SHORT, make_config

from harness.cell import run_cell
from harness.data import load_splits, training_batches
from harness.records import SCHEMA

_runs: dict[tuple[str, str], dict] = {}


def short_run(fault: str, dataset: str) -> dict:
    """One short cell per (fault, dataset), shared by the tests below."""
    if (fault, dataset) not in _runs:
        _runs[fault, dataset] = run_cell(make_config(*SHORT, f"fault={fault}", f"dataset={dataset}"))
    return _runs[fault, dataset]


@pytest.mark.parametrize("dataset", DATASETS)
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
        make_config(f"fault={fault}").fault.diagnosis,
    )
    assert len(record["train_loss_curve"]) == 40 and record["val_steps"] == [0, 20, 40]


# What each planted fault does to the measurement it is documented to move, against the healthy run.
@pytest.mark.parametrize("dataset", DATASETS)
def test_no_zero_grad_accumulates_gradients(dataset):
    assert short_run("healthy", dataset)["accumulation_ratio"] == pytest.approx(1.0)
    assert short_run("no_zero_grad", dataset)["accumulation_ratio"] > 3.0


@pytest.mark.parametrize("dataset", DATASETS)
def test_frozen_params_leave_most_weights_without_gradient(dataset):
    assert short_run("healthy", dataset)["params_without_grad"] == 0
    record = short_run("frozen_params", dataset)
    assert record["params_without_grad"] == 4 and record["params_without_grad_share"] > 0.7


@pytest.mark.parametrize("dataset", DATASETS)
def test_starved_loader_waits_most_of_the_time(dataset):
    assert short_run("healthy", dataset)["data_wait_share"] < 0.3
    assert short_run("starved_loader", dataset)["data_wait_share"] > 0.5


@pytest.mark.parametrize("dataset", DATASETS)
def test_unscaled_inputs_start_far_above_ln_c(dataset):
    healthy, unscaled = short_run("healthy", dataset), short_run("unscaled_inputs", dataset)
    assert abs(healthy["first_loss"] - healthy["ln_classes"]) < 0.5
    assert unscaled["first_loss"] > 4 * unscaled["ln_classes"]


@pytest.mark.parametrize("dataset", DATASETS)
def test_dead_relu_starts_dead_and_cannot_memorize(dataset):
    assert short_run("healthy", dataset)["dead_unit_share_init"] < 0.1
    record = short_run("dead_relu", dataset)
    assert record["dead_unit_share_init"] > 0.9
    assert record["memorize_best_loss"] > 0.5 * record["ln_classes"]


@pytest.mark.parametrize("dataset", DATASETS)
def test_learning_rates_move_the_update_ratio(dataset):
    healthy = short_run("healthy", dataset)["update_ratio_median"]
    assert short_run("lr_too_low", dataset)["update_ratio_median"] < healthy / 100
    assert short_run("lr_too_high", dataset)["update_ratio_median"] > healthy * 5


@pytest.mark.parametrize("dataset", DATASETS)
def test_model_too_small_has_a_narrow_hidden_layer(dataset):
    sizes = {f: sum(math.prod(s) for s in _shapes(f, dataset)) for f in ("healthy", "model_too_small")}
    assert sizes["model_too_small"] < sizes["healthy"] / 10


def _shapes(fault, dataset):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = make_config(f"fault={fault}", f"dataset={dataset}")
    spec = OmegaConf.to_container(cfg.model)
    spec.pop("name")
    model = instantiate(spec, n_inputs=8, n_classes=10)
    return [p.shape for p in model.parameters()]


@pytest.mark.parametrize("dataset", DATASETS)
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

    slow = training_batches(x, y, batch_size=5, seed=0, latency_s=0.02)
    start = time.perf_counter()
    for _ in range(5):
        next(slow)
    assert time.perf_counter() - start >= 0.1


@pytest.mark.parametrize("dataset", DATASETS)
def test_healthy_recipe_reaches_good_validation_accuracy(dataset):
    record = run_cell(make_config(f"dataset={dataset}"))  # the full 600-step recipe
    assert record["status"] == "ok"
    assert record["final_val_acc"] > 0.9
    assert np.isclose(record["first_loss"], record["ln_classes"], atol=0.3)
