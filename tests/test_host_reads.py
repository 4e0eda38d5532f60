"""The doctor reads nothing back to the host between census steps (issue 35, "no device sync per step").

A read of a tensor's value by the host waits for the device (a sync). The doctor keeps its per-step readings on
the model's device and reads them at census steps only. `HostReads` (harness/instruments/host_reads.py) counts the
reads made during each training step of a plain loop under the doctor: every scalar read (`aten._local_scalar_dense`,
which `.item()`, `float(t)`, `bool(t)` and `int(t)` all end in), every copy from a device to the CPU, and, since
these tests run on the CPU where every tensor is on the host already and `.cpu()`, `.tolist()` and `.numpy()` copy
nothing, each call of those three on a CPU tensor: on a GPU the same call on the model's tensors would copy and
wait. So the count is that of the reads that would sync on a GPU. The loop itself reads nothing (SGD keeps no step
counter to read), which the bare loop's count shows.
"""

import math

import pytest
import torch
from torch import nn

from doctor import Doctor
from harness.instruments import labels
from harness.instruments.host_reads import HostReads

pytestmark = pytest.mark.usefixtures("one_thread")

CENSUS_EVERY = 8
STEPS = 40


def loop(doctor_kwargs: dict | None, nan_at: int | None = None, batch: int = 32, zero_grad: bool = True, plant=None):
    """A plain loop on a small classifier with dropout; the host reads of each step (None: without the doctor).

    `nan_at`: a NaN input in that step's batch; `plant(step, net, out)`: the step's output as the loop uses it.
    """
    torch.manual_seed(0)
    x, y = torch.randn(512, 10), torch.randint(0, 3, (512,))
    if nan_at is not None:
        x[nan_at * batch + 3, 4] = math.nan
    net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, 512, batch)] * 3
    doctor = Doctor(net, optimizer, loss_fn, census_every=CENSUS_EVERY, **doctor_kwargs) if doctor_kwargs else None
    per_step, counted = [], 0
    with HostReads(where=True) as reads:
        # From one step's end to the next's: the doctor reads each batch (doctor.watch) before the loop body runs.
        for step, (xb, yb) in enumerate(doctor.watch(batches[:STEPS]) if doctor else batches[:STEPS]):
            out = net(xb)
            loss = loss_fn(plant(step, net, out) if plant else out, yb)
            if zero_grad:
                optimizer.zero_grad()
            loss.backward()
            if doctor:
                doctor.after_backward(loss)
            optimizer.step()
            per_step.append(reads.count - counted)
            counted = reads.count
    return per_step, reads, doctor


def census_steps(doctor: Doctor) -> set[int]:
    return {c["step"] for c in doctor.instruments.census.censuses}


LOOPS = {
    "every step watched": ({"budget": None}, {}),
    "the default budget": ({"budget": 0.03}, {}),
    # Batches of 5: the probe batch grows over 4 steps (its census at initialization waits for a census step).
    "small batches": ({"budget": None}, {"batch": 5}),
    # .grad never cleared: the clearing check reads each watched step's gradient (counted on the device).
    "no zero_grad": ({"budget": None}, {"zero_grad": False}),
}


@pytest.mark.parametrize("case", LOOPS)
def test_the_doctor_reads_nothing_back_between_census_steps(monkeypatch, case):
    doctor_kwargs, loop_kwargs = LOOPS[case]
    monkeypatch.setattr(labels, "FLUSH_VALUES", 64)  # labels due for counting every few steps: held to a census
    bare, bare_reads, _ = loop(None, **loop_kwargs)
    assert sum(bare) == 0, bare_reads.calls  # the loop on its own reads nothing
    per_step, reads, doctor = loop(doctor_kwargs, **loop_kwargs)
    censuses = census_steps(doctor)
    assert len(censuses) >= 6  # 0, 1, 2, 4, 8, ... : the counting below covers several windows
    between = {step: n for step, n in enumerate(per_step) if n and step not in censuses}
    assert not between, (between, reads.places)
    # The count sees reads at all: the census steps read (the gradient census, the non-finite check).
    assert all(per_step[step] > 0 for step in censuses if step < STEPS)
    assert doctor.nonfinite.reads >= len(censuses) - 1
    report = doctor.report()
    assert report.verdict == ("no_zero_grad" if case == "no zero_grad" else "healthy"), report


def test_a_nan_between_census_steps_is_found_at_the_next_with_its_step_and_origin():
    per_step, reads, doctor = loop({"budget": None}, nan_at=11)
    censuses = census_steps(doctor)
    assert 11 not in censuses and 16 in censuses
    # Found at the census step after it (16), not on the NaN's own step: nothing was read in between.
    assert not {step: n for step, n in enumerate(per_step) if n and step not in censuses}, reads.places
    origin = doctor.nonfinite.origin
    assert (origin.loss_step, origin.step, origin.what) == (11, 11, "inputs")
    assert origin.detail == "1 of 320 input values of the batch at step 11 were NaN or inf"


def nan_weights_at_11(step, net, out):
    if step == 10:
        with torch.no_grad():
            net[3].bias[1] = math.nan  # as an update that went wrong would leave it, for step 11
    return out


def nan_loss_at_11(step, net, out):
    return out.log_softmax(1) * 0 + (math.inf if step == 11 else 0.0) * 0  # inf * 0: a NaN loss, finite outputs


PLANTED = {
    "the weights": (
        nan_weights_at_11,
        "weights",
        "the weights 3.bias (norm nan) were non-finite after the update of step 10, whose gradients were finite",
    ),
    "the loss": (nan_loss_at_11, "loss", "inputs, weights and the model's outputs were finite (RMS output "),
}


@pytest.mark.parametrize("case", PLANTED)
def test_what_went_nonfinite_first_on_a_step_between_census_steps_is_read_from_what_it_kept(case):
    plant, what, detail = PLANTED[case]
    per_step, reads, doctor = loop({"budget": None}, plant=plant)
    assert not {step: n for step, n in enumerate(per_step) if n and step not in census_steps(doctor)}, reads.places
    origin = doctor.nonfinite.origin
    assert (origin.loss_step, origin.what) == (11, what), origin
    assert origin.detail.startswith(detail), origin.detail


def test_the_counter_counts_each_kind_of_read():
    t = torch.tensor([1.5, 2.0])
    with HostReads() as reads:
        t[0].item(), float(t[0]), bool(t[0]), int(t[1]), t.tolist(), t.cpu(), t.numpy()
        assert t.sum() > 0  # a comparison used as a condition is a scalar read too
    assert reads.count == 8
    assert reads.calls == {"scalar": 5, "tolist": 1, "cpu": 1, "numpy": 1}
    with HostReads() as reads:
        (t * 2).sum(), t.to(torch.float64), torch.isfinite(t).all()  # device-side work: no read
    assert reads.count == 0


class TinyLM(nn.Module):
    """Next-token logits (batch, time, 32) from token ids: the sequence task's path (positions, the padding count)."""

    def __init__(self):
        super().__init__()
        self.embed, self.out = nn.Embedding(32, 16), nn.Linear(16, 32)

    def forward(self, input_ids, attention_mask):
        return self.out(torch.relu(self.embed(input_ids)) * attention_mask.unsqueeze(-1))


def test_the_sequence_path_with_an_attention_mask_reads_nothing_back_between_census_steps():
    torch.manual_seed(0)
    ids = torch.randint(1, 32, (256, 13))
    mask = torch.ones_like(ids)
    mask[::2, 9:] = 0  # every other row padded: the doctor counts the padding the loss scores, on the device
    labels = torch.where(mask[:, 1:] == 1, ids[:, 1:], -100)  # padding's labels -100, as a collator leaves them
    batches = [
        {"input_ids": ids[i : i + 16, :-1], "attention_mask": mask[i : i + 16, :-1], "labels": labels[i : i + 16]}
        for i in range(0, 256, 16)
    ] * 3
    net = TinyLM()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(
        net, optimizer, loss_fn, census_every=CENSUS_EVERY, budget=None, inputs=("input_ids", "attention_mask")
    )
    per_step, counted = [], 0
    with HostReads(where=True) as reads:
        for batch in doctor.watch(batches[:STEPS]):
            logits = net(batch["input_ids"], batch["attention_mask"])
            loss = loss_fn(logits.reshape(-1, 32), batch["labels"].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
            per_step.append(reads.count - counted)
            counted = reads.count
    censuses = census_steps(doctor)
    assert doctor.task.kind == "sequence" and len(censuses) >= 6
    assert not {step: n for step, n in enumerate(per_step) if n and step not in censuses}, reads.places
    assert doctor.report().measurements["padded_batches"] == STEPS  # the padding was counted, at the report


def test_the_grids_padding_count_by_the_pad_id_reads_nothing_back_until_its_columns():
    from harness.instruments.padding import PaddingWatch

    watch = PaddingWatch(None, -100, pad_id=0)
    x = torch.randint(1, 32, (16, 12))
    x[::2, 8:] = 0  # every other window padded with the pad id, its targets scored: the fault's batches
    with HostReads(where=True) as reads:
        for _ in range(STEPS):
            watch.see(x, x.roll(-1, dims=1))
    assert reads.count == 0, reads.places
    with HostReads() as reads:
        assert watch.measurements()["padding_scored_batch_share"] == 1.0
    assert reads.count == 1  # the sums, read once
