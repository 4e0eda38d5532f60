"""The outcome gate's yardsticks that know the run: a clean copy of its own model, and its own tokens' counts.

A run is harmed when it learned measurably less than it could (analysis/outcome_gate.py: OutcomeGate). What it could is
read by yardsticks that know nothing of its loop: the quick references (ridge, 5-NN), a clean copy of its model
from its own factory scored on validation (harness/instruments/memorization.py: `fit_capacity`), and for a
next-token run the unigram and bigram counts of its own training tokens (harness/text.py: `pair_count_losses`).

The copy's case is the issue's: a loop whose rate is too low beats ridge and 5-NN on a problem they cannot read (an
XOR of two inputs), and falls far short of what the same model reaches in a clean loop. The committed thresholds
give the copy no tolerance (analysis/outcome_gate.py: OutcomeGate.copy_quantile says why): the report says its reading,
and the gate opens on it where thresholds with a tolerance are given.
"""

import math

import numpy as np
import pytest
import torch
from test_sequence_outputs import TRAIN_FILES, VALIDATION_FILES, text
from torch import nn

from analysis.outcome_gate import OUTCOME_GATE
from analysis.rules import load_thresholds
from doctor import Doctor
from harness.text import VOCAB, pair_count_losses, token_losses

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_sparse_pair_counts_give_the_dense_tables_losses():
    rng = np.random.default_rng(0)
    train, val = rng.integers(0, VOCAB, 5000), rng.integers(0, VOCAB, 800)
    unigram = np.bincount(train[1:], minlength=VOCAB)
    bigram = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    np.add.at(bigram, (train[:-1], train[1:]), 1)
    losses = pair_count_losses((train[:-1], train[1:]), (val[:-1], val[1:]), VOCAB)
    assert losses["lm_unigram_val_loss"] == pytest.approx(token_losses(unigram, val[1:]).mean())
    assert losses["lm_bigram_val_loss"] == pytest.approx(token_losses(bigram, val[1:], contexts=val[:-1]).mean())
    per_token = [token_losses(unigram, val[1:]), token_losses(bigram, val[1:], contexts=val[:-1])]
    better = min(per_token, key=np.mean)
    assert losses["lm_counts_val_se"] == pytest.approx(better.std() / math.sqrt(len(better)))


def test_on_a_large_vocabulary_and_little_text_the_unigram_is_the_better_count():
    """Add-one over 50,000 possible next tokens drowns the few pairs seen: the yardstick is the better count."""
    rng = np.random.default_rng(1)
    vocab = 50_000
    tokens = rng.zipf(1.3, 6000) % vocab  # a long-tailed vocabulary, as a tokenizer's is
    losses = pair_count_losses((tokens[:4999], tokens[1:5000]), (tokens[5000:-1], tokens[5001:]), vocab)
    assert losses["lm_unigram_val_loss"] < losses["lm_bigram_val_loss"]


# ----- a clean copy of the model as the yardstick ---------------------------------------------------------------
def xor_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four classes from 12 Gaussian inputs: the sign of x0 * x1 (an XOR, which no linear model reads) and of x2."""
    x = torch.randn(n, 12, generator=torch.Generator().manual_seed(seed))
    return x, (x[:, 0] * x[:, 1] > 0).long() + 2 * (x[:, 2] > 0).long()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def xor_run(rate: float, factory: bool = True, steps: int = 300) -> Doctor:
    """SGD with momentum at `rate` on the XOR problem, watched by the doctor with a validation set."""
    torch.manual_seed(0)
    (x, y), (xv, yv) = xor_data(2048, 0), xor_data(512, 100)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=rate, momentum=0.9)
    validation = [(xv[i : i + 128], yv[i : i + 128]) for i in range(0, 512, 128)]
    doctor = Doctor(
        model, optimizer, nn.CrossEntropyLoss(), validation=validation, model_factory=mlp if factory else None
    )
    batches = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 2048, 64)] * math.ceil(steps / 32)
    for inputs, targets in doctor.watch(batches[:steps]):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    doctor.finish()
    return doctor


def test_a_run_that_beats_the_references_but_not_a_clean_copy_of_its_model_is_told_so():
    """The copy's reading is said on the report; it opens the gate only where the thresholds give it a tolerance."""
    doctor = xor_run(1e-2)  # too low a rate for 300 steps: it learns the linear cut, and little of the XOR
    measured, report = doctor.measurements(), doctor.report()
    assert measured["reference_val_acc"] < measured["final_val_acc"] < measured["capacity_val_score"] - 0.1
    assert measured["capacity_val_examples"] == 512
    assert report.verdict == "healthy", report  # the committed thresholds give the copy no tolerance
    assert "what does this model reach in a clean loop? a fresh copy from the model factory" in str(report)
    assert f"reaches {measured['capacity_val_score']:.0%} on 512 validation examples" in str(report)
    assert "scored on 512 validation" in report.cost.line()
    with_copy = doctor.report(thresholds={**load_thresholds(300), OUTCOME_GATE.copy_name: 0.12})
    assert with_copy.verdict != "healthy", with_copy
    gate = with_copy.findings[0].evidence
    assert "short of a clean copy of this model's" in gate and "(the same model fitted in a clean loop;" in gate


def test_without_a_model_factory_the_same_run_is_held_against_the_references_alone():
    doctor = xor_run(1e-2, factory=False)
    assert math.isnan(doctor.measurements()["capacity_val_score"])
    report = doctor.report(thresholds={**load_thresholds(300), OUTCOME_GATE.copy_name: 0.12})
    assert report.verdict == "healthy"  # it beats ridge and 5-NN: the only yardstick it has
    assert "no clean copy" in report.cost.line() and "in a clean loop?" not in str(report)


def test_a_run_that_reaches_the_clean_copy_is_healthy():
    doctor = xor_run(3e-2)
    measured = doctor.measurements()
    assert measured["final_val_acc"] > measured["reference_val_acc"] + 0.2  # the references are no yardstick here
    assert doctor.report().verdict == "healthy", doctor.report()


# ----- a next-token run's own token counts as the yardstick ------------------------------------------------------
LENGTH = 16


class CharModel(nn.Module):
    """A character model: an embedding, a GRU over the positions, and the next byte's logits."""

    def __init__(self):
        super().__init__()
        self.embed, self.rnn, self.out = nn.Embedding(VOCAB, 32), nn.GRU(32, 64, batch_first=True), nn.Linear(64, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(tokens))[0])


def next_byte_windows(tokens: torch.Tensor, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(tokens) - LENGTH - 1, (count,), generator=torch.Generator().manual_seed(seed))
    at = starts.unsqueeze(1) + torch.arange(LENGTH)
    return tokens[at], tokens[at + 1]


def train_positions(doctor: Doctor, model: nn.Module, optimizer, batches: list) -> Doctor:
    """A loop over (B, T) batches whose loss scores every position, watched by `doctor`, which is finished."""
    for inputs, targets in doctor.watch(batches):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs).transpose(1, 2), targets)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    doctor.finish()
    return doctor


def next_byte_run(rate: float, steps: int = 200) -> Doctor:
    """A character model on the standard library's source, predicting each next byte; no model factory."""
    torch.manual_seed(0)
    (x, y), (xv, yv) = (
        next_byte_windows(text(TRAIN_FILES), steps * 32, 0),
        next_byte_windows(text(VALIDATION_FILES), 256, 1),
    )
    model = CharModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=rate)
    validation = [(xv[i : i + 64], yv[i : i + 64]) for i in range(0, 256, 64)]
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss(), validation=validation)
    return train_positions(doctor, model, optimizer, [(x[i : i + 32], y[i : i + 32]) for i in range(0, len(x), 32)])


def test_a_next_token_run_is_held_against_the_counts_of_its_own_tokens():
    healthy, starved = next_byte_run(1e-2), next_byte_run(1e-4)  # the second's rate leaves it above the counts
    for doctor in (healthy, starved):
        measured = doctor.measurements()
        assert measured["lm_bigram_val_loss"] < measured["lm_unigram_val_loss"] < math.log(VOCAB)  # 1024 windows
    assert healthy.report().features["loss_over_counts"] < 1 and healthy.report().verdict == "healthy"
    assert starved.report().features["loss_over_counts"] > 1.05
    # Its loss is still falling (still_improving): a check that needs harm, failing only because the gate opened.
    assert starved.report().verdict != "healthy", starved.report()


def test_a_sequence_task_that_is_not_next_token_prediction_has_no_token_counts():
    """A tagger's labels are not its next tokens: counting which token follows which says nothing of it."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (64, LENGTH))
    tags = tokens % 3  # a tag per token
    model = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    doctor = Doctor(model, optimizer, nn.CrossEntropyLoss(), validation=[(tokens[:16], tags[:16])])
    train_positions(doctor, model, optimizer, [(tokens[i : i + 16], tags[i : i + 16]) for i in range(0, 64, 16)] * 5)
    assert math.isnan(doctor.measurements()["lm_bigram_val_loss"])
