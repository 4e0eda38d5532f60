"""What the loss reads: its own prediction and target, whatever computed them, and the facts judged on them.

The instruments read the loss's arguments on census steps (harness/instruments/loss_inputs.py), not `forward()`'s
output: a decoder in a Lightning `training_step`, a reshape in the loop, a functional loss, a model that computes
its own loss. The facts clamped_logits, nll_on_probabilities and loss_broadcast are judged on them, in the grid and
in the doctor alike.
"""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from analysis.features import features
from doctor import Doctor, UnsupportedTask
from harness.instruments import Instruments
from harness.instruments.loss_inputs import LossCalls, broadcast_factor, floor_share

COLUMNS = ("loss_read", "logit_floor_share", "nll_input_positive_share", "likelihood_loss_min", "loss_broadcast_factor")


def watched(model, loss_of, batches, census_every=1, optimizer=None):
    """Train on `batches` with `loss_of(model, x, y)` as the loop's step computes it; the instruments' columns."""
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=1e-3)
    # As the doctor builds them (fresh_gradient=False): the grid's fresh-gradient read calls the loss on forward()'s
    # output itself, which a step that decodes first does not score.
    instruments = Instruments(model, optimizer, F.cross_entropy, census_every=census_every, fresh_gradient=False)
    for x, y in instruments.watch(batches):
        loss = loss_of(model, x, y)
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    measured = instruments.finish()
    return measured


def class_batches(n=4, rows=32, inputs=8, classes=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(rows, inputs, generator=generator), torch.randint(0, classes, (rows,), generator=generator))
        for _ in range(n)
    ]


def test_a_functional_loss_is_read_with_its_shapes():
    measured = watched(nn.Linear(8, 3), lambda m, x, y: F.cross_entropy(m(x), y), class_batches())
    assert measured["loss_read"] == "cross_entropy" and measured["loss_shapes"] == "(32, 3) vs (32,)"
    assert measured["logit_floor_share"] == 0.0  # raw logits go below 0
    assert math.isnan(measured["nll_input_positive_share"]) and math.isnan(measured["loss_broadcast_factor"])
    assert 0 < measured["likelihood_loss_min"] < 2


class Encoder(nn.Module):
    """Lightning's README autoencoder: forward returns the embedding; training_step decodes it and scores that."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 64))

    def forward(self, x):
        return self.encoder(x)

    def training_step(self, batch):
        x, _ = batch
        return F.mse_loss(self.decoder(self(x)), x)


def test_a_training_step_that_decodes_is_read_at_the_loss_not_at_forward():
    batches = [(torch.rand(16, 64), torch.randint(0, 10, (16,))) for _ in range(3)]
    measured = watched(Encoder(), lambda m, x, y: m.training_step((x, y)), batches)
    # forward() gives (16, 3); the loss compared the decoded (16, 64) with the inputs.
    assert measured["loss_read"] == "mse" and measured["loss_shapes"] == "(16, 64) vs (16, 64)"
    assert measured["loss_broadcast_factor"] == 1.0


class TimeFirst(nn.Module):
    """The transformer tutorial's shape: (T, B, V) outputs, reshaped in the loop to (T * B, V) before the loss."""

    def __init__(self, vocabulary=11):
        super().__init__()
        self.embed, self.head = nn.Embedding(vocabulary, 8), nn.Linear(8, vocabulary)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def test_a_loop_that_reshapes_before_its_loss_is_read_as_reshaped():
    batches = [(torch.randint(0, 11, (5, 4)), torch.randint(0, 11, (5, 4))) for _ in range(3)]
    measured = watched(TimeFirst(), lambda m, x, y: F.cross_entropy(m(x).view(-1, 11), y.reshape(-1)), batches)
    assert measured["loss_read"] == "cross_entropy" and measured["loss_shapes"] == "(20, 11) vs (20,)"


class OwnLoss(nn.Module):
    """A Hugging Face-style model: given labels, forward computes its own loss with an nn.Module loss."""

    def __init__(self):
        super().__init__()
        self.linear, self.loss = nn.Linear(8, 3), nn.CrossEntropyLoss()

    def forward(self, input_ids, labels=None):
        logits = self.linear(input_ids)
        return {"loss": self.loss(logits, labels) if labels is not None else None, "logits": logits}


def test_a_loss_computed_inside_the_model_is_read():
    model = OwnLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    instruments = Instruments(model, optimizer, F.cross_entropy, census_every=1, fresh_gradient=False)
    batches = [{"input_ids": x, "labels": y} for x, y in class_batches()]
    for batch in instruments.watch(batches):
        loss = model(**batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    measured = instruments.finish()
    assert measured["loss_read"] == "cross_entropy" and measured["loss_shapes"] == "(32, 3) vs (32,)"


def test_a_loss_handed_over_detached_is_matched_by_its_value():
    def loss_of(model, x, y):
        return F.cross_entropy(model(x), y) + 0.0 * F.mse_loss(model(x), torch.zeros(len(x), 3))

    class Detached(Instruments):
        def after_backward(self, loss):  # as the Lightning and Hugging Face callbacks hand it over
            super().after_backward(loss.detach())

    model = nn.Linear(8, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    instruments = Detached(model, optimizer, F.cross_entropy, census_every=1, fresh_gradient=False)
    for x, y in instruments.watch(class_batches()):
        loss = loss_of(model, x, y)
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    assert instruments.finish()["loss_read"] == "cross_entropy"  # its value is the sum's: the mse term is 0


def test_of_a_loss_of_several_terms_the_first_it_was_computed_from_is_read_and_evaluations_are_not():
    def loss_of(model, x, y):
        with torch.no_grad():  # an evaluation in the step: no gradient, not the training loss
            F.mse_loss(model(x), torch.zeros(len(x), 3))
        out = model(x)
        return F.cross_entropy(out, y) + 0.01 * F.l1_loss(out, torch.zeros_like(out))

    measured = watched(nn.Linear(8, 3), loss_of, class_batches())
    assert measured["loss_read"] == "cross_entropy"


def test_the_mode_is_active_on_census_steps_only(monkeypatch):
    steps_seen = []  # the loop's step at each call the mode handled
    step = -1
    original = LossCalls.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        steps_seen.append(step)
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(LossCalls, "__torch_function__", counted)
    model = nn.Linear(8, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    instruments = Instruments(model, optimizer, F.cross_entropy, census_every=100, fresh_gradient=False)
    for step, (x, y) in enumerate(instruments.watch(class_batches(n=40))):  # noqa: B007 - read by `counted`
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    instruments.finish()
    # census_every 100: steps 0, 1, 2, 4, 8, 16 and 32 of 40 are census steps. Their mode is entered as the batch is
    # handed out, while the test's counter still reads the step before; no other step sees it at all.
    census = {0, 1, 2, 4, 8, 16, 32}
    assert census <= set(steps_seen) <= census | {c - 1 for c in census}
    before = len(steps_seen)
    torch.relu(torch.ones(2)) + 1  # after the loop: nothing goes through it
    assert len(steps_seen) == before


def test_the_readings_on_known_tensors():
    assert floor_share(torch.tensor([[0.0, 0.0, 2.0], [0.0, 1.0, 3.0]])) == pytest.approx(0.5)  # 3 of 6 cut to 0
    assert floor_share(torch.tensor([[0.5, 0.1, 2.0], [0.5, 0.1, 2.0]])) == 0.0  # alike rows, none cut: no floor
    assert floor_share(torch.tensor([[-1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])) == 0.0  # a negative score: no floor at 0
    assert math.isnan(float(floor_share(torch.zeros(4, 3))))  # a constant output is constant_output's
    assert math.isnan(float(floor_share(torch.full((4, 2), 0.5))))  # probability rows are double_softmax's
    assert broadcast_factor(torch.zeros(8, 1), torch.zeros(8)) == 8.0
    assert broadcast_factor(torch.zeros(8, 3), torch.zeros(8, 3)) == 1.0
    assert broadcast_factor(torch.zeros(8, 3), torch.zeros(3)) == 1.0  # a row repeated: no more comparisons


# ----- the facts, through the doctor as a user runs it -------------------------------------------------------------
def trained(doctor, optimizer, batches, loss_of, epochs=1):
    """The doctor's three lines around a plain loop: `loss_of(x, y)` is the step's loss; the doctor's report."""
    for _ in range(epochs):
        for x, y in doctor.watch(batches):
            loss = loss_of(x, y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    return doctor.report()


def doctor_run(model, loss_fn, targets_of=lambda y: y, steps=60, regression=False):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(640, 8, generator=generator)
    labels = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0).long()  # three classes, learnable
    targets = inputs[:, :2].sum(dim=1) if regression else labels
    batches = [(inputs[i : i + 32], targets[i : i + 32]) for i in range(0, 512, 32)]
    validation = [(inputs[512:], targets[512:])]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    doctor = Doctor(model, optimizer, loss_fn, validation=validation, max_steps=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # mse_loss's own warning about the broadcast
        epochs = -(-steps // len(batches))  # the step budget cuts the last
        return trained(doctor, optimizer, batches, lambda x, y: loss_fn(model(x), targets_of(y)), epochs)


class ReluOnLogits(nn.Module):
    """Lightning's backbone example: a functional torch.relu on the logits, outside the last module."""

    def __init__(self):
        super().__init__()
        self.hidden, self.head = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        return torch.relu(self.head(torch.relu(self.hidden(x))))


def test_a_relu_on_the_logits_is_named_and_never_read_as_too_small_a_model():
    report = doctor_run(ReluOnLogits(), F.cross_entropy)
    assert report.verdict == "clamped_logits"
    assert report.measurements["logit_floor_share"] > 0.05
    assert math.isnan(features(report.measurements)["capacity_fit"])  # no capacity evidence on such a run
    assert "model_too_small" not in [f.verdict for f in report.findings]


def test_an_nll_loss_on_probabilities_is_named_and_on_log_probabilities_is_not():
    probabilities = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1))
    report = doctor_run(probabilities, nn.NLLLoss())
    assert report.verdict == "nll_on_probabilities"
    assert report.measurements["likelihood_loss_min"] < 0  # a negative "negative log-likelihood"
    log_probabilities = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.LogSoftmax(dim=1))
    report = doctor_run(log_probabilities, nn.NLLLoss())
    assert report.measurements["nll_input_positive_share"] == 0.0 and report.measurements["likelihood_loss_min"] > 0
    assert "nll_on_probabilities" not in [f.verdict for f in report.findings]


@pytest.mark.filterwarnings("ignore:Using a target size")
def test_a_regression_loss_that_broadcasts_is_named_and_one_of_matching_shapes_is_not():
    broadcast = doctor_run(nn.Linear(8, 1), nn.MSELoss(), regression=True)
    assert broadcast.verdict == "loss_broadcast"
    assert broadcast.measurements["loss_broadcast_factor"] == 32.0  # (32, 1) against (32,)
    matching = doctor_run(nn.Linear(8, 1), nn.MSELoss(), targets_of=lambda y: y.unsqueeze(1), regression=True)
    assert matching.measurements["loss_broadcast_factor"] == 1.0
    assert "loss_broadcast" not in [f.verdict for f in matching.findings]


# ----- the task read from the loss's inputs, where forward()'s output and the batch's targets make none ---------------
def test_a_loop_that_flattens_a_time_first_output_is_judged_on_what_its_loss_reads():
    torch.manual_seed(0)
    text = torch.arange(3000) % 11  # a cycle: each token's next is the following one, learnable from the token itself

    def chunks(tokens):  # the transformer tutorial's layout: (35, batch) inputs, their next tokens flattened
        columns = tokens[: len(tokens) // 4 * 4].reshape(4, -1).t()
        return [(columns[i : i + 35], columns[i + 1 : i + 36].reshape(-1)) for i in range(0, len(columns) - 36, 35)]

    model = TimeFirst()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss(), validation=chunks(text[:800]))
    # before: refused, "model output (35, 4, 11) for 140 targets"
    report = trained(doctor, optimizer, chunks(text), lambda x, y: F.cross_entropy(model(x).view(-1, 11), y), epochs=3)
    measured = report.measurements
    assert measured["task"] == "multiclass" and measured["loss_shapes"] == "(140, 11) vs (140,)"
    assert measured["final_val_acc"] > 0.9  # the doctor's own evaluation reads the output as the loop reshapes it
    assert "not judged on sequence outputs: shuffled_labels" in report.note  # its rows are positions, not examples
    assert report.verdict == "healthy", str(report)


def test_a_step_that_decodes_is_judged_on_its_own_losses():
    torch.manual_seed(0)
    images = torch.rand(640, 64)
    model = Encoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    doctor = Doctor(model, optimizer, F.mse_loss, inputs=0, targets=0)  # the reconstruction's targets: its inputs
    batches = [(images[i : i + 16], torch.zeros(16)) for i in range(0, 640, 16)]
    # before: refused, "targets (16, 64) and model output (16, 3) make no task"
    report = trained(doctor, optimizer, batches, lambda x, _: model.training_step((x, None)), epochs=2)
    measured = report.measurements
    assert measured["task"] == "regression" and measured["loss_shapes"] == "(16, 64) vs (16, 64)"
    assert "judged on the loop's own losses" in report.note and "(16, 3)" in report.note
    assert 0 < measured["final_train_loss"] < measured["first_loss"] and math.isnan(measured["final_val_loss"])
    assert math.isnan(measured["output_spread"])  # forward()'s embedding is no prediction to read


def test_a_loss_the_doctor_cannot_read_leaves_the_refusal_at_the_first_step():
    model = nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    doctor = Doctor(model, optimizer, lambda out, y: ((out.sum(1, keepdim=True) - y) ** 2).mean())
    batches = [(torch.randn(8, 8), torch.randn(8, 5)) for _ in range(3)]
    with pytest.raises(UnsupportedTask, match="the loss's own inputs could not be read at the first step"):
        for x, y in doctor.watch(batches):
            loss = ((model(x).sum(1, keepdim=True) - y) ** 2).mean()  # no torch.nn.functional loss to read
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()


def test_an_additive_attention_mask_is_no_input_with_a_scale():
    from harness.batches import input_rms

    data = torch.full((35, 4, 8), 2.0)
    mask = torch.triu(torch.full((35, 35), float("-inf")), diagonal=1)  # the transformer tutorial's src_mask
    assert input_rms((data, mask)) == pytest.approx(2.0)  # before: inf, read as inputs far out of scale
    assert math.isnan(input_rms((mask,)))
