"""The two-process TrainCheck recipes: two gloo ranks really train, the bug is where it should be, the runner copes.

x-jxmnop-ddp-out-of-sync and pytorch-84803 run rank 0 under the doctor in the runner's process and rank 1 in a
process the recipe starts (benchmarks/realbugs/traincheck/ranks.py). The fast tests check the pieces on a one-rank
group; the slow ones run each recipe through the runner on a short budget (the tests' cap) and read what both ranks
recorded at the end (ranks.LAST): the steps each trained, how far apart the replicas' weights are, what was zeroed.
"""

import importlib.util
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from benchmarks.realbugs.__main__ import TRAINCHECK, not_ported, run_one, traincheck_hash, traincheck_helpers
from benchmarks.realbugs.traincheck import ranks
from benchmarks.working.common import EPOCH_CAP_VARIABLE

SUBJECTS = ("x-jxmnop-ddp-out-of-sync", "pytorch-84803")


def _recipe(subject: str, variant: str):
    """A recipe file as a module of its own name (not the runner's "buggy"/"fixed")."""
    path = TRAINCHECK / subject / f"{variant}.py"
    name = f"_test_{subject.replace('-', '_')}_{variant}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_rank():
    """A gloo group of one rank in this process, destroyed after the test."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{ranks.free_port()}", rank=0, world_size=1, timeout=timedelta(seconds=60)
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_two_process_subjects_are_ported_and_96600_says_it_is_84803():
    for subject in SUBJECTS:
        assert not_ported(subject, TRAINCHECK) is None
        assert ranks.__file__ in {str(p) for p in traincheck_helpers(TRAINCHECK / subject)}
    assert "pytorch-84803" in not_ported("pytorch-96600", TRAINCHECK)
    # the helper is hashed with the subjects that import it, and only with them (other cache keys unchanged)
    assert [p.name for p in traincheck_helpers(TRAINCHECK / "stackoverflow-60335387")] == ["common.py"]
    assert len(traincheck_hash(TRAINCHECK / "pytorch-84803")) == 12


def test_the_lossy_link_zeroes_a_share_of_the_calls_and_counts_them():
    buggy = _recipe("pytorch-84803", "buggy")
    always = buggy.LossyLink(1.0, seed=0)
    weight = torch.ones(3, requires_grad=True)
    weight.grad = torch.ones(3)
    always.corrupt(weight, "to")
    assert not weight.detach().any() and not weight.grad.any()  # the tensor and its .grad, one draw each
    assert always.calls == {"to": 2} and always.zeroed == {"to": 2}
    never = buggy.LossyLink(0.0, seed=0)
    batch = torch.ones(4, 16)
    assert never.to_device(batch).all() and never.zeroed == {}
    link = buggy.LossyLink(buggy.LOSS_RATE, seed=1)
    for _ in range(20_000):
        link.corrupt(torch.ones(2), "all_gather")
    assert buggy.LOSS_RATE == 0.01 and 120 < link.zeroed["all_gather"] < 290  # about 200 of 20000


def test_the_lossy_hook_zeroes_what_ddp_averages(one_rank):
    buggy = _recipe("pytorch-84803", "buggy")
    grads = {}
    for rate in (0.0, 1.0):
        torch.manual_seed(0)
        net = nn.Linear(4, 3)
        replica = DistributedDataParallel(net)
        replica.register_comm_hook(buggy.LossyLink(rate, seed=0), buggy.lossy_all_reduce)
        replica(torch.randn(5, 4)).pow(2).sum().backward()
        grads[rate] = net.weight.grad.clone()
    assert grads[0.0].abs().sum() > 0 and not grads[1.0].any()


def test_the_buggy_trainer_runs_ddp_on_odd_steps_only_and_the_fixed_one_always(one_rank):
    buggy, fixed = _recipe("x-jxmnop-ddp-out-of-sync", "buggy"), _recipe("x-jxmnop-ddp-out-of-sync", "fixed")
    net = buggy.model()
    assert buggy.model_for(0, net) is net and buggy.model_for(2, net) is net
    assert isinstance(buggy.model_for(1, net), DistributedDataParallel)
    assert not hasattr(fixed, "model_for")
    assert "replica = DistributedDataParallel(net)" in Path(fixed.__file__).read_text()  # one wrapper, built once
    batch = buggy.collate([buggy.PAIRS[i] for i in range(8)])
    assert batch["labels"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert buggy.model()(batch["input_ids"], batch["attention_mask"]).shape == (8, 8)  # one row of logits per example


def test_two_ranks_joins_both_and_leaves_no_group(tmp_path):
    recipe = tmp_path / "recipe.py"
    recipe.write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def rank1(value):\n    dist.all_reduce(torch.tensor([float(value)]))\n"
    )
    with ranks.two_ranks(str(recipe), "rank1", 5):
        total = torch.tensor([2.0])
        dist.all_reduce(total)
        assert dist.get_world_size() == 2
    assert float(total) == 7.0 and not dist.is_initialized()


def test_a_failing_rank_1_is_an_error_on_rank_0_not_a_hang(tmp_path):
    recipe = tmp_path / "recipe.py"
    recipe.write_text("def rank1():\n    raise ValueError('rank 1 fails')\n")
    with pytest.raises(RuntimeError), ranks.two_ranks(str(recipe), "rank1"):
        dist.all_reduce(torch.ones(1))  # rank 1 is gone: the collective fails instead of waiting
    assert not dist.is_initialized()


# (subject, variant, the tests' cap, steps each rank trains under it): 84803 counts epochs (125 steps each, about
# 10 s a run), x-jxmnop counts steps (10, as TrainCheck's bug_short.py runs it; the doctor's own fits on its longer
# sequences make a run take about 25 s). All slow: whole two-rank runs (the fast tests above check the recipes'
# parts), and the fast suite is held under 5 minutes on 2 cores.
RUNS = [
    pytest.param("x-jxmnop-ddp-out-of-sync", "buggy", "10", 10, marks=pytest.mark.slow),
    pytest.param("x-jxmnop-ddp-out-of-sync", "fixed", "10", 10, marks=pytest.mark.slow),
    pytest.param("pytorch-84803", "buggy", "2", 250, marks=pytest.mark.slow),
    pytest.param("pytorch-84803", "fixed", "2", 250, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("subject", "variant", "cap", "steps"), RUNS)
def test_both_ranks_train_under_the_runner(monkeypatch, subject, variant, cap, steps):
    monkeypatch.setenv(EPOCH_CAP_VARIABLE, cap)
    result = run_one(subject, variant, seed=0, root=TRAINCHECK)
    assert result["error"] is None, result["error"]  # the doctor judged rank 0: no refusal, no crash
    assert result["verdict"] is not None and not dist.is_initialized()
    record = ranks.LAST
    assert record["steps"] == [steps, steps]  # both ranks trained, the same number of steps
    if subject == "x-jxmnop-ddp-out-of-sync":
        # the plain module's steps are never averaged: the replicas drift apart; one DDP wrapper keeps them equal
        assert record["gap"] > 1e-6 if variant == "buggy" else record["gap"] == 0.0
        return
    assert record["gap"] == 0.0  # DDP keeps the replicas equal, even when one rank's share of a sum is lost
    accuracy = [acc for _, acc in record["evaluation"]]
    assert accuracy[0] == accuracy[1] and 0.0 < accuracy[0] <= 1.0  # the gathered evaluation, the same on both
    if variant == "fixed":
        assert "zeroed" not in record  # no injection at all
        return
    for calls, zeroed in zip(record["calls"], record["zeroed"], strict=True):
        assert calls["all_reduce"] >= steps and calls["to"] > 3 * steps  # every gradient bucket, every batch tensor
        assert sum(zeroed.values()) > 0  # about 1 in 100 of them zeroed, on each rank
