"""The doctor's callbacks on two processes: the Hugging Face Trainer and Lightning under torchrun, gloo on the CPU.

One torchrun launch per library runs its cases on both ranks (tests/ddp_integration_runs.py): a healthy run,
healthy on every rank with the section across the 2 ranks, and one distributed fault the framework lets a user
plant, named. The callbacks call finish() on every rank, so the report's gather meets on each; rank 0 alone logs
the verdict. The launches take about 20 s each (two processes importing torch and the library): slow. What they
found broken is tested on one process, fast: the Trainer's num_items_in_batch counted over every rank, and
Lightning's backward inside optimizer.step(closure). Where a library is missing its tests skip.

Not planted, because the frameworks do not let a user make them: no DistributedSampler under the Trainer (it
gives the loader one itself), and set_epoch never called (the Trainer, through accelerate, and Lightning's fit
loop call it on the loader's sampler each epoch).
"""

import json

import jsonschema
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from torch import nn
from torchrun import launch

from doctor.integrations import ImpliedLoss
from harness.instruments.ranks import RankWatch

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # Lightning 2.6 builds torch's LeafSpec, which torch 2.13 deprecates: its warning, not the doctor's.
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
HF_CASES = ("hf_healthy", "hf_out_of_sync", "hf_gpt2_healthy")
LIGHTNING_CASES = ("lightning_healthy", "lightning_no_sampler", "lightning_gave_up")


def launched(tmp_path_factory, cases: tuple[str, ...]) -> dict:
    """The cases of tests/ddp_integration_runs.py on two ranks under torchrun: {(case, rank): what the rank wrote}."""
    return launch("ddp_integration_runs.py", tmp_path_factory.mktemp("ddp"), cases)


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory) -> dict:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    return launched(tmp_path_factory, HF_CASES)


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory) -> dict:
    pytest.importorskip("lightning.pytorch")
    return launched(tmp_path_factory, LIGHTNING_CASES)


def _healthy_on_both_ranks(runs: dict, case: str, checks: list) -> None:
    for rank in (0, 1):
        document = runs[case, rank]["report"]
        jsonschema.validate(document, SCHEMA)
        assert document["verdict"] == "healthy", runs[case, rank]["text"]
        ranks = document["ranks"]
        assert ranks["rank"] == rank and ranks["world_size"] == 2 and ranks["gathered"], ranks
        assert [check["ok"] for check in ranks["checks"]] == checks, ranks
    assert "across the 2 ranks (this is rank 0; every rank's evidence" in runs[case, 0]["text"]


def _named_on_both_ranks(runs: dict, case: str, verdict: str, named: str) -> None:
    for rank in (0, 1):
        document = runs[case, rank]["report"]
        assert document["verdict"] == verdict, runs[case, rank]["text"]
        assert named in document["findings"][0]["evidence"], runs[case, rank]["text"]
        failed = [check["check"] for check in document["ranks"]["checks"] if check["ok"] is False]
        assert len(failed) == 1, document["ranks"]  # the one fault planted, no other check across ranks
    assert runs[case, 0]["report"]["findings"][0] == runs[case, 1]["report"]["findings"][0]


def _logged_on_rank_zero_only(runs: dict, case: str, level: str, verdict: str) -> list:
    """Rank 0 logs the verdict once; rank 1 logs nothing (its report is the caller's to print or not)."""
    (logged,) = runs[case, 0]["logged"]
    assert logged[0] == level and f"doctor: verdict: {verdict}" in logged[1], logged
    assert runs[case, 1]["logged"] == [], runs[case, 1]["logged"]
    return logged


# ----- Hugging Face Trainer ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_hugging_face_healthy_two_process_training_is_healthy_and_logged_once(hf_runs):
    # Not judged under a framework: set_epoch (the callback sees batches, not passes over a loader).
    _healthy_on_both_ranks(hf_runs, "hf_healthy", [True, None, True, True])
    logged = _logged_on_rank_zero_only(hf_runs, "hf_healthy", "INFO", "healthy")
    # The Trainer counts num_items_in_batch over both ranks; the BERT head leaves it unused: checked all the same.
    assert "it reproduced the training loss of the first batch" in logged[1]


@pytest.mark.slow
def test_hugging_face_causal_language_model_on_two_processes_reads_its_shift_and_checks_its_loss(hf_runs):
    """GPT-2 divides its summed loss by num_items_in_batch, which the Trainer counts over both ranks."""
    _healthy_on_both_ranks(hf_runs, "hf_gpt2_healthy", [True, None, True, True])
    for rank in (0, 1):
        measured = hf_runs["hf_gpt2_healthy", rank]["measured"]
        assert measured["task"] == "sequence" and measured["target_shift"] == 1
    logged = _logged_on_rank_zero_only(hf_runs, "hf_gpt2_healthy", "INFO", "healthy")
    assert "it reproduced the training loss of the first batch" in logged[1]


@pytest.mark.slow
def test_hugging_face_weights_changed_on_the_main_process_only_are_replicas_out_of_sync(hf_runs):
    _named_on_both_ranks(
        hf_runs, "hf_out_of_sync", "replicas_out_of_sync", "parameter classifier.weight differs between rank 0"
    )
    _logged_on_rank_zero_only(hf_runs, "hf_out_of_sync", "WARNING", "replicas_out_of_sync")


def test_a_loss_that_leaves_num_items_in_batch_unused_is_checked_when_the_trainer_counts_every_rank():
    """The Trainer's num_items_in_batch under DDP: the labels of every rank (here 2 x 32) for a batch of 32."""
    torch.manual_seed(0)
    logits, labels = torch.randn(32, 4), torch.randint(0, 4, (32,))
    mean = F.cross_entropy(logits, labels)
    items = torch.tensor(64.0)
    for model_loss in (mean, mean * 32 / 64):  # a head that ignores the count; one that divides its sum by it
        implied = ImpliedLoss()
        implied.check(logits, labels, model_loss, strict=False, items=items)
        assert implied.checked is True
    smoothed = ImpliedLoss()  # another loss is still told apart, either way
    smoothed.check(logits, labels, F.cross_entropy(logits, labels, label_smoothing=0.2), strict=False, items=items)
    assert smoothed.checked is False


# ----- Lightning ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_lightning_healthy_two_process_fit_is_healthy_and_logged_once(lightning_runs):
    _healthy_on_both_ranks(lightning_runs, "lightning_healthy", [True, None, True, True])
    _logged_on_rank_zero_only(lightning_runs, "lightning_healthy", "INFO", "healthy")


@pytest.mark.slow
def test_lightning_without_its_distributed_sampler_is_no_distributed_sampler(lightning_runs):
    named = "ranks 0 and 1 trained on identical batches at 100 of the 100 batches compared"
    _named_on_both_ranks(lightning_runs, "lightning_no_sampler", "no_distributed_sampler", named)
    _logged_on_rank_zero_only(lightning_runs, "lightning_no_sampler", "WARNING", "no_distributed_sampler")


@pytest.mark.slow
def test_a_rank_whose_doctor_gave_up_still_meets_the_gather_and_the_others_report_without_it(lightning_runs):
    """Rank 1's batches are dicts the doctor cannot read: it gives up there; rank 0's report is made, not waited on.

    Without the rank's part in the gather, rank 0 waits in all_gather_object until the group's timeout (two
    minutes here) and the launch fails.
    """
    given_up = lightning_runs["lightning_gave_up", 1]
    assert given_up["report"]["verdict"] is None and "targets key" in given_up["report"]["cannot_judge"]
    assert [level for level, _ in given_up["logged"]] == ["WARNING"]  # its own reason, on its own rank
    document = lightning_runs["lightning_gave_up", 0]["report"]
    jsonschema.validate(document, SCHEMA)
    assert document["verdict"] == "healthy", lightning_runs["lightning_gave_up", 0]["text"]
    checks = document["ranks"]["checks"]
    assert [check["ok"] for check in checks] == [None, None, None, None, None], checks  # one rank's evidence only
    assert checks[-1]["check"] == "rank 1's doctor watched the run to its end"
    assert "it gave up (" in checks[-1]["detail"] and "targets key" in checks[-1]["detail"]
    assert len(lightning_runs["lightning_gave_up", 0]["logged"]) == 1  # the verdict, once


def test_a_doctor_let_go_takes_its_ranks_hooks_off_too():
    """A doctor that gave up stops measuring on every step: the rank's own readings' hooks come off with the rest."""
    from doctor.integrations import let_go
    from doctor.watch import Doctor

    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    doctor = Doctor(net, optimizer, F.cross_entropy)
    doctor.ranks = RankWatch(net, optimizer, rank=0, world_size=2)  # as under a process group of two
    let_go(doctor)
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
    assert not net._forward_pre_hooks and not any(p._backward_hooks for p in net.parameters())


def test_a_backward_inside_the_optimizers_closure_has_its_stepped_gradient_read_after_it():
    """Lightning runs training_step and backward in optimizer.step(closure), after the step's pre-hook.

    The stepped gradient is read once the closure has run: one rank, .grad zeroed, one backward per step, so
    it is the rank's own, 1x its local bound (before, it was read before the backward: no reading at all).
    """
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    watch = RankWatch(net, optimizer, rank=0, world_size=2)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        optimizer.step(closure)
    gradients = watch.evidence()["gradients"]
    watch.close()
    assert sorted(gradients, key=int) == ["0", "1", "2"]
    for local, reduced in gradients.values():
        assert reduced / local == pytest.approx(1.0, rel=1e-6)
