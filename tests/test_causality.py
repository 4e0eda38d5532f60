"""The causality probe (harness/instruments/causality.py): which runs it judges, and what it reads where it does.

Tiny models on random tokens, a few steps each: the probe reads the model, not what it has learned, so no run here
needs to learn anything.
"""

import math

import pytest
import torch
from torch import nn

from doctor import Doctor

VOCAB, LENGTH, BATCH = 32, 12, 8


class Mixer(nn.Module):
    """Token embeddings, one self-attention layer (masked causally unless told) and a map to the vocabulary.

    `dropout_in_eval`: dropout on the attention's output even in eval mode, so two identical calls differ.
    """

    def __init__(self, causal: bool = True, dropout_in_eval: bool = False, classes: int = VOCAB):
        super().__init__()
        self.causal, self.dropout_in_eval = causal, dropout_in_eval
        self.embed = nn.Embedding(VOCAB, 16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.embed(input_ids)
        length = input_ids.shape[1]
        mask = torch.ones(length, length, dtype=torch.bool).triu(1) if self.causal else None  # True: not attended
        padding = None if attention_mask is None else attention_mask == 0
        mixed, _ = self.attention(hidden, hidden, hidden, attn_mask=mask, key_padding_mask=padding)
        if self.dropout_in_eval:
            mixed = nn.functional.dropout(mixed, 0.5, training=True)
        return self.head(hidden + mixed)


def tokens(seed: int, rows: int = BATCH) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, LENGTH + 1), generator=torch.Generator().manual_seed(seed))


def run(model: nn.Module, batches: list, as_dict: bool = False) -> dict:
    """A few steps of a plain loop under the doctor; its measurements."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn, budget=None)
    for batch in doctor.watch(batches):
        output = model(**batch[0]) if as_dict else model(batch[0])
        loss = loss_fn(output.reshape(-1, output.shape[-1]), batch[1].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    return doctor.report().measurements


def next_token_batches(rows: int = BATCH) -> list:
    return [(t[:, :-1], t[:, 1:]) for t in (tokens(seed, rows) for seed in range(4))]


@pytest.mark.parametrize("causal", [True, False])
def test_a_next_token_model_is_judged_by_whether_its_outputs_move_with_later_tokens(causal):
    effect = run(Mixer(causal=causal), next_token_batches())["future_token_effect"]
    assert effect == 0 if causal else effect > 0.01


def test_a_batch_of_one_window_is_probed_with_its_own_later_tokens_reversed():
    assert run(Mixer(causal=False), next_token_batches(rows=1))["future_token_effect"] > 0.01
    assert run(Mixer(causal=True), next_token_batches(rows=1))["future_token_effect"] == 0


def test_the_tokens_are_found_among_the_inputs_and_the_attention_mask_is_left_as_it_is():
    batches = []
    for x, y in next_token_batches():
        mask = torch.ones_like(x)
        mask[0, -3:] = 0  # padding at the end of one window; its targets stay (no -100 here)
        batches.append({"input_ids": x, "attention_mask": mask, "labels": y})
    for causal in (True, False):
        measured = run(
            Mixer(causal=causal),
            [({k: b[k] for k in ("input_ids", "attention_mask")}, b["labels"]) for b in batches],
            as_dict=True,
        )
        assert measured["future_token_effect"] == 0 if causal else measured["future_token_effect"] > 0.01


def test_labels_that_are_not_the_next_tokens_are_not_judged():
    # A bidirectional encoder tagging each token (its class is the token's parity): reading later tokens is its
    # design, and its labels are not the next inputs.
    tagged = [(t[:, :-1], t[:, :-1] % 2) for t in (tokens(seed) for seed in range(4))]
    assert math.isnan(run(Mixer(causal=False, classes=2), tagged)["future_token_effect"])
    # Labels equal to the inputs (not shifted): a copy task, answer_leak's to judge.
    copied = [(t[:, :-1], t[:, :-1]) for t in (tokens(seed) for seed in range(4))]
    assert math.isnan(run(Mixer(causal=False), copied)["future_token_effect"])


def test_a_model_whose_outputs_differ_between_two_identical_calls_is_not_judged():
    measured = run(Mixer(causal=True, dropout_in_eval=True), next_token_batches())
    assert math.isnan(measured["future_token_effect"])


class PrefixMixer(Mixer):
    """A prefix language model: the first PREFIX positions attend to the whole prefix, the rest causally."""

    PREFIX = 8

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.embed(input_ids)
        length = input_ids.shape[1]
        blocked = torch.ones(length, length, dtype=torch.bool).triu(1)
        blocked[: self.PREFIX, : self.PREFIX] = False  # the prefix reads all of itself
        mixed, _ = self.attention(hidden, hidden, hidden, attn_mask=blocked)
        return self.head(hidden + mixed)


def test_positions_the_loss_ignores_are_not_compared():
    # The prefix's labels are -100: its outputs may read the whole prefix, past the window's middle (position 6).
    batches = [(x, y.masked_fill(torch.arange(LENGTH) < PrefixMixer.PREFIX, -100)) for x, y in next_token_batches()]
    assert run(PrefixMixer(), batches)["future_token_effect"] == 0
    scored_prefix = next_token_batches()  # the same model, its prefix scored as next tokens: a leak
    assert run(PrefixMixer(), scored_prefix)["future_token_effect"] > 0.01
