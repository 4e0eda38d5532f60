"""The doctor on several processes: two gloo ranks launched by torchrun, each with the three lines, one fault each.

The runs (tests/ddp_runs.py) go through `python -m torch.distributed.run --nproc_per_node 2`, as a user launches
them: one launch runs every case in turn on both ranks (most of its time is two processes importing torch), and
each test reads what the two ranks wrote. Each distributed fault is named, on both ranks, by the finding across
ranks; a healthy run and gradients averaged by hand are healthy; the doctor adds no collective to the training
loop, and its report runs one all_gather_object. The pieces are tested on one process too: the judgement on
hand-made evidence, a rank's own readings, a report whose process group is gone.
"""

import json

import jsonschema
import pytest
import torch
from conftest import ROOT
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchrun import launch

from doctor import distributed
from doctor.diagnosis import diagnose
from doctor.observed import Observed
from doctor.observed_io import from_plain, to_plain
from harness.instruments.ranks import LATEST, RankWatch, keep, sampled, sampler_of

pytestmark = pytest.mark.usefixtures("one_thread")

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
CASES = ("healthy", "no_sampler", "no_set_epoch", "out_of_sync", "summed", "averaged_by_hand", "collectives")
CASES += ("accumulated", "no_zero_grad", "batchnorm", "buffers_unsynced")
ACROSS = ("no_distributed_sampler", "set_epoch_not_called", "replicas_out_of_sync", "gradients_summed")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Every case of tests/ddp_runs.py on two ranks under torchrun: {(case, rank): what the rank wrote}."""
    return launch("ddp_runs.py", tmp_path_factory.mktemp("ddp"), CASES)


def _across(document: dict) -> list[str]:
    return [f["verdict"] for f in document["findings"] if f["verdict"] in ACROSS]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
def test_a_healthy_two_process_run_is_healthy_on_both_ranks(runs):
    for rank in (0, 1):
        document = runs["healthy", rank]["report"]
        jsonschema.validate(document, SCHEMA)
        assert document["verdict"] == "healthy", runs["healthy", rank]["text"]
        ranks = document["ranks"]
        assert ranks["rank"] == rank and ranks["world_size"] == 2 and ranks["gathered"]
        assert [check["ok"] for check in ranks["checks"]] == [True, True, True, True], ranks
    assert "across the 2 ranks (this is rank 0; every rank's evidence" in runs["healthy", 0]["text"]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
@pytest.mark.parametrize(
    ("case", "verdict", "named"),
    [
        ("no_sampler", "no_distributed_sampler", "ranks 0 and 1 trained on identical batches at 64 of the 64"),
        ("no_set_epoch", "set_epoch_not_called", "DistributedSampler(shuffle=True) gave 8 of the first 8 batches"),
        ("out_of_sync", "replicas_out_of_sync", "before the first optimizer step, parameter 0.weight differs"),
        ("summed", "gradients_summed", "the gradient the optimizer stepped on was"),
    ],
)
def test_each_distributed_fault_is_the_verdict_on_both_ranks(runs, case, verdict, named):
    for rank in (0, 1):
        document = runs[case, rank]["report"]
        jsonschema.validate(document, SCHEMA)
        assert document["verdict"] == verdict and _across(document) == [verdict], runs[case, rank]["text"]
        (finding,) = [f for f in document["findings"] if f["verdict"] == verdict]
        assert finding["value"] > finding["threshold"] and finding["direction"] == "above" and finding["margin"] > 0
        assert named in finding["evidence"]
        failed = [check["check"] for check in document["ranks"]["checks"] if check["ok"] is False]
        assert len(failed) == 1, document["ranks"]  # the one fault planted, no other check across ranks
    # every rank gets the same findings across ranks: the same evidence, judged the same way
    assert runs[case, 0]["report"]["findings"][0] == runs[case, 1]["report"]["findings"][0]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
def test_summed_gradients_are_about_twice_what_averaging_allows_and_averaged_by_hand_is_healthy(runs):
    summed = runs["summed", 0]["report"]["findings"][0]
    assert 1.3 < summed["value"] <= 2.0  # the sum of two gradients pointing roughly one way: up to 2x the mean
    by_hand = runs["averaged_by_hand", 0]["report"]
    assert by_hand["verdict"] == "healthy" and not _across(by_hand), runs["averaged_by_hand", 0]["text"]
    assert "averaged, not summed: the stepped gradient was 0." in runs["averaged_by_hand", 0]["text"]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
@pytest.mark.parametrize("case", ["accumulated", "no_zero_grad", "batchnorm"])
def test_accumulation_carried_gradients_and_broadcast_buffers_are_no_fault_across_ranks(runs, case):
    """No finding across ranks where none was planted.

    The local bound holds what .grad carries from step to step, and buffers are compared after DDP's broadcast.
    """
    for rank in (0, 1):
        document = runs[case, rank]["report"]
        assert not _across(document), runs[case, rank]["text"]
        assert all(check["ok"] for check in document["ranks"]["checks"]), document["ranks"]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
def test_a_loop_that_never_zeroes_grad_is_no_zero_grad_under_ddp_and_accumulation_is_not(runs):
    """DDP writes the averaged gradient into .grad in place: the clearing check reads .grad by its hook there."""
    for rank in (0, 1):
        assert runs["no_zero_grad", rank]["report"]["verdict"] == "no_zero_grad", runs["no_zero_grad", rank]["text"]
        assert runs["accumulated", rank]["report"]["verdict"] != "no_zero_grad", runs["accumulated", rank]["text"]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
def test_buffers_not_broadcast_are_replicas_out_of_sync_named_by_the_buffer(runs):
    for rank in (0, 1):
        (finding, *_) = runs["buffers_unsynced", rank]["report"]["findings"]
        assert finding["verdict"] == "replicas_out_of_sync", runs["buffers_unsynced", rank]["text"]
        assert "buffer 1.running_mean differs between rank 0 and rank 1" in finding["evidence"]


@pytest.mark.slow  # their fixture runs torchrun (about 15 s)
def test_the_doctor_adds_no_collective_to_the_loop_and_gathers_once_at_the_report(runs):
    for rank in (0, 1):
        counted = runs["collectives", rank]["collectives"]
        assert counted["bare"] > 0  # DDP's own: its broadcasts at the start and one all_reduce per step
        assert counted["watched"] == counted["bare"], counted  # the same loop with the doctor: not one more
        assert counted["report"] == counted["one_gather"] > 0, counted  # the report: one all_gather_object


# ----- the pieces, on one process -------------------------------------------------------------------------------
def _evidence(rank: int, prints, sampler="DistributedSampler(shuffle=True)", checksums=None, gradients=None) -> dict:
    """One rank's evidence as RankWatch.evidence() gives it, by hand: `prints` per pass."""
    return {
        "rank": rank,
        "world_size": 2,
        "steps": 10,
        "names": ["parameter w", "buffer b"],
        "passes": [{"sampler": sampler, "prints": p} for p in prints],
        "checksums": checksums or {},
        "gradients": gradients or {},
    }


def _judged(*evidence) -> distributed.Ranks:
    return distributed.judge({"rank": 0, "world_size": 2, "gathered": True, "evidence": list(evidence)})


def test_identical_batches_fire_only_past_half_of_those_compared():
    a = [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]]
    b = [[[1.0, 2.0], [3.0, 4.0], [0.5, 6.0], [7.5, 8.0]]]  # two of four the same: not more than half
    assert not _judged(_evidence(0, a), _evidence(1, b)).findings
    (finding,) = _judged(_evidence(0, a), _evidence(1, a)).findings
    assert finding.verdict == "no_distributed_sampler" and finding.value == 1.0


def test_a_repeated_order_is_set_epoch_only_under_a_sampler_that_shuffles():
    same = [[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]]]
    other = [[[9.0, 2.0], [3.0, 9.0]], [[8.0, 2.0], [3.0, 8.0]]]
    (finding,) = _judged(_evidence(0, same), _evidence(1, other)).findings
    assert finding.verdict == "set_epoch_not_called" and "rank 0's DistributedSampler" in finding.evidence
    # shuffle=False on purpose: the same order every epoch is what was asked for
    unshuffled = _judged(_evidence(0, same, "DistributedSampler(shuffle=False)"), _evidence(1, other, None))
    assert not unshuffled.findings
    assert unshuffled.lines[1].ok is None and "not judged" in unshuffled.lines[1].detail


def test_replicas_differ_past_rounding_only_and_the_first_differing_tensor_is_named():
    equal = {"0": [[1.0, 2.0, 0.5], [4.0, 4.0, 1.0]], "4": [[1.5, 2.5, 0.5], [4.0, 4.0, 1.0]]}
    rounding = {"0": [[1.0 + 1e-9, 2.0, 0.5], [4.0, 4.0, 1.0]], "4": [[1.5, 2.5, 0.5], [4.0, 4.0, 1.0]]}
    drifted = {"0": [[1.0, 2.0, 0.5], [4.0, 4.0, 1.0]], "4": [[1.5, 2.5, 0.5], [4.1, 4.1, 1.0]]}
    assert not _judged(_evidence(0, [], checksums=equal), _evidence(1, [], checksums=rounding)).findings
    (finding,) = _judged(_evidence(0, [], checksums=equal), _evidence(1, [], checksums=drifted)).findings
    assert finding.verdict == "replicas_out_of_sync" and finding.value == 1
    assert "after 4 optimizer steps, buffer b differs between rank 0 and rank 1" in finding.evidence


def test_the_stepped_gradient_is_judged_against_the_mean_of_the_ranks_own():
    averaged = ({"0": [2.0, 1.4], "1": [1.0, 1.0]}, {"0": [1.0, 1.4], "1": [1.0, 1.0]})  # 1.4 / 1.5, 1.0 / 1.0
    summed = ({"0": [2.0, 2.9], "1": [1.0, 1.9]}, {"0": [1.0, 2.9], "1": [1.0, 1.9]})
    ok = _judged(*(_evidence(r, [], gradients=g) for r, g in enumerate(averaged)))
    assert not ok.findings and ok.lines[3].ok
    (finding,) = _judged(*(_evidence(r, [], gradients=g) for r, g in enumerate(summed))).findings
    assert finding.verdict == "gradients_summed" and finding.value == pytest.approx((2.9 / 1.5 + 1.9) / 2)


def test_one_rank_on_its_own_reads_its_batches_its_replica_and_both_gradient_norms():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    watch = RankWatch(net, optimizer, rank=0, world_size=2)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for step in range(5):
        watch.new_pass([(x, y)])
        watch.batch(x, y)
        if step < 3:  # then two steps that carry .grad over: what it held is part of what is stepped on
            optimizer.zero_grad()
        for half in (slice(0, 4), slice(4, 8)):  # two backward passes per step: accumulation
            nn.functional.cross_entropy(net(x[half]), y[half]).backward()
        optimizer.step()
    evidence = watch.evidence()
    watch.close()
    assert evidence["steps"] == 5 and evidence["names"][-1] == "buffer 1.num_batches_tracked"
    assert len(evidence["passes"]) == 4  # the first four passes are kept
    assert [p["prints"] for p in evidence["passes"]] == [evidence["passes"][0]["prints"]] * 4  # the same batch
    assert sorted(evidence["checksums"], key=int) == ["0", "1", "2", "4"]  # the sampled steps
    assert sorted(evidence["gradients"], key=int) == ["0", "1", "2", "4"]
    for local, reduced in evidence["gradients"].values():
        assert 0 < reduced <= local * (1 + 1e-9)  # one rank: the stepped gradient is its own, within the bound


def test_the_sampler_is_read_from_the_loader():
    data = TensorDataset(torch.zeros(8, 2))
    assert sampler_of(DataLoader(data, shuffle=True)) == "RandomSampler(shuffle=True)"
    assert sampler_of(DataLoader(data)) == "SequentialSampler(shuffle=False)"
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=False)
    assert sampler_of(DataLoader(data, sampler=sampler)) == "DistributedSampler(shuffle=False)"
    assert sampler_of([(torch.zeros(2),)]) is None


def test_without_a_process_group_at_the_report_only_this_ranks_evidence_is_judged_and_it_round_trips():
    repeated = _evidence(0, [[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]]])
    ranks = distributed.gather(repeated)  # no process group in this process
    assert ranks["gathered"] is False and ranks["evidence"] == [repeated]
    judged = distributed.judge(ranks)
    assert [f.verdict for f in judged.findings] == ["set_epoch_not_called"]
    assert [line.ok for line in judged.lines] == [None, False, None, None]
    observed = Observed({"task": "multiclass"}, steps=10, ranks=ranks)
    assert from_plain(json.loads(json.dumps(to_plain(observed)))).ranks == ranks


def test_a_report_judges_the_findings_across_ranks_first(tmp_path):
    from report_runs import _probe

    healthy = _probe(lambda p: torch.optim.Adam(p, lr=1e-2), steps=200)
    assert healthy.ranks is None and healthy.to_dict()["ranks"] is None  # one process: no section
    ranks = {"rank": 1, "world_size": 2, "gathered": True, "evidence": [_evidence(0, [[[1.0, 2.0]]])] * 2}
    ranks["evidence"] = [{**ranks["evidence"][0], "rank": r} for r in (0, 1)]
    report = diagnose(Observed(healthy.measurements, healthy.steps, ranks=ranks))
    assert [f.verdict for f in report.failing] == ["no_distributed_sampler"]
    assert "healthy" not in [f.verdict for f in report.findings]  # the fact is the verdict; no healthy beside it
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), SCHEMA)
    assert "across the 2 ranks (this is rank 1; every rank's evidence, gathered at the report):" in str(report)


def test_under_a_grad_scaler_the_local_norms_are_read_unscaled():
    """One rank, one backward per step, .grad zeroed: its own gradient is the one stepped on, 1x, not 1/65536x."""
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    watch = RankWatch(net, optimizer, rank=0, world_size=2, scaler=scaler)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for _ in range(3):
        optimizer.zero_grad()
        scaler.scale(nn.functional.cross_entropy(net(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
    gradients = watch.evidence()["gradients"]
    watch.close()
    assert len(gradients) == 3
    for local, reduced in gradients.values():
        assert reduced / local == pytest.approx(1.0, rel=1e-6)


def test_a_report_with_a_finding_across_ranks_draws_its_picture(tmp_path):
    from report_runs import _probe

    healthy = _probe(lambda p: torch.optim.Adam(p, lr=1e-2), steps=60)
    evidence = [_evidence(r, [], gradients={"0": [1.0, 1.9], "1": [1.0, 1.8]}) for r in (0, 1)]
    ranks = {"rank": 0, "world_size": 2, "gathered": True, "evidence": evidence}
    report = diagnose(Observed(healthy.measurements, healthy.steps, ranks=ranks))
    assert report.verdict == "gradients_summed"
    assert report.plot(tmp_path / "summed.png").exists()


def test_a_long_run_keeps_the_powers_of_two_and_the_latest_sampled_steps():
    readings: dict = {}
    for step in range(20_000):
        if sampled(step):
            keep(readings, step, step)
    powers = [2**k for k in range(15)]
    assert [0, *powers] == sorted(readings)[: len(powers) + 1]
    assert sorted(s for s in readings if s & (s - 1))[-3:] == [19_700, 19_800, 19_900]
    assert len(readings) == 1 + len(powers) + LATEST
