"""Sequence outputs: a causal language model's (B, T, V) logits against (B, T) next-token targets, in a plain loop.

The model is a tiny transformer written here in plain torch, trained byte-level on Python's own standard library
source (whole files for training, other files for validation): real text the doctor's thresholds never saw, read
for evaluation only. The loop computes its loss on the flattened positions, as such loops do, and hands the doctor
nothing reshaped. Each position is a row of the task (harness/targets.py); a position whose target is the loss's
ignore_index (-100, what collators pad with) is left out of every measurement.
"""

import math

import pytest
import torch
from torch import nn

from doctor import Doctor
from doctor.refusals import UnsupportedTask
from harness.targets import PositionLoss, Scorer, identify_loss, read_task, task_of
from harness.text import read_files

VOCAB = 256  # bytes
CONTEXT = 48
BATCH = 16
# Modules every CPython ships, split by file: the validation text is files the model never trained on.
TRAIN_FILES = ("textwrap.py", "string.py", "shlex.py", "fnmatch.py", "heapq.py", "bisect.py", "glob.py", "queue.py")
VALIDATION_FILES = ("colorsys.py", "keyword.py", "sched.py")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host's cores are shared: one thread is as fast here and disturbs no one
    yield
    torch.set_num_threads(threads)


def text(names) -> torch.Tensor:
    """The bytes of these standard library files, laid end to end (harness/text.py, as the grid reads them)."""
    return torch.tensor(list(read_files(names)), dtype=torch.long)


class TinyLM(nn.Module):
    """Token and position embeddings, one transformer layer (causal unless told), a linear map to the vocabulary."""

    def __init__(self, width: int = 48, layers: int = 1, causal: bool = True):
        super().__init__()
        self.causal = causal
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Embedding(CONTEXT, width)
        layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length) if self.causal else None
        hidden = self.embed(tokens) + self.position(torch.arange(length))
        return self.head(self.blocks(hidden, mask=mask, is_causal=self.causal))


def windows(tokens: torch.Tensor, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random windows of the text: inputs (count, CONTEXT) and their next tokens (count, CONTEXT)."""
    starts = torch.randint(0, len(tokens) - CONTEXT - 1, (count,), generator=torch.Generator().manual_seed(seed))
    at = starts.unsqueeze(1) + torch.arange(CONTEXT)
    return tokens[at], tokens[at + 1]


def padded(x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence cut to a random length of 16 to CONTEXT tokens: the rest padded, its targets -100."""
    lengths = torch.randint(16, CONTEXT + 1, (len(x),), generator=torch.Generator().manual_seed(seed))
    pad = torch.arange(CONTEXT).unsqueeze(0) >= lengths.unsqueeze(1)
    return x.masked_fill(pad, 0), y.masked_fill(pad, -100)


def batches(x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x[i : i + BATCH], y[i : i + BATCH]) for i in range(0, len(x), BATCH)]


def generated_text(length: int, seed: int) -> torch.Tensor:
    """A generated text: an order-2 Markov chain over 64 symbols in which each pair of symbols allows 4 next ones.

    A problem made here, not read anywhere, so the doctor's choices may be looked at on it.
    """
    generator = torch.Generator().manual_seed(0)  # one chain; `seed` draws its text
    symbols = 64
    following = torch.randint(1, symbols, (symbols, symbols, 4), generator=generator)
    weights = torch.rand(symbols, symbols, 4, generator=generator).cumsum(dim=2)
    draws = torch.rand(length, generator=torch.Generator().manual_seed(seed)) * weights[..., -1].max()
    tokens = [1, 2]
    for draw in draws.tolist():
        cumulative = weights[tokens[-2], tokens[-1]]
        pick = min(int(torch.searchsorted(cumulative, draw * cumulative[-1] / weights[..., -1].max())), 3)
        tokens.append(int(following[tokens[-2], tokens[-1], pick]))
    return torch.tensor(tokens)


def data(steps: int, pad: bool, generated: bool = False) -> tuple[list, list]:
    """Training batches for `steps` steps and validation batches (other files), padded with -100 if `pad`."""
    training_text = generated_text(40_000, seed=0) if generated else text(TRAIN_FILES)
    validation_text = generated_text(10_000, seed=1) if generated else text(VALIDATION_FILES)
    train_x, train_y = windows(training_text, steps * BATCH, seed=0)
    val_x, val_y = windows(validation_text, 128, seed=1)
    if pad:
        train_x, train_y = padded(train_x, train_y, seed=2)
        val_x, val_y = padded(val_x, val_y, seed=3)
    return batches(train_x, train_y), batches(val_x, val_y)


def train(
    rate: float,
    steps: int,
    pad: bool = False,
    model_factory=None,
    causal: bool = True,
    generated: bool = False,
    **doctor_options,
) -> Doctor:
    """A plain loop: Adam at `rate`, the loss on the flattened positions, the doctor watching it."""
    training, validation = data(steps, pad, generated)
    torch.manual_seed(0)
    model = TinyLM(causal=causal)
    optimizer = torch.optim.Adam(model.parameters(), lr=rate)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    doctor = Doctor(
        model,
        optimizer,
        loss_fn,
        validation=validation,
        model_factory=model_factory,
        **doctor_options,
    )
    for x, y in doctor.watch(training):
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    return doctor


def test_a_sequence_task_is_read_per_position():
    logits, targets = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    targets[1, 3:] = -100  # padding
    task = read_task(targets, logits)
    assert (task_of(targets, logits), task.n_classes) == ("sequence", 7)
    assert task.uninformed_loss == pytest.approx(math.log(7))
    scorer = Scorer("sequence")
    scorer.add(logits, targets)
    kept = targets != -100
    assert scorer.count == int(kept.sum()) == 8
    assert scorer.value() == pytest.approx(float((logits.argmax(dim=2)[kept] == targets[kept]).double().mean()))
    loss_fn = nn.CrossEntropyLoss()
    assert identify_loss(loss_fn, logits, targets) == "cross_entropy"
    # A loss that takes the output as it is (classes on dim 1) is called that way, and named the same.
    transposed = PositionLoss.of(lambda o, y: nn.functional.cross_entropy(o.transpose(1, 2), y), logits, targets)
    assert not transposed.on_positions
    flat = loss_fn(logits.reshape(-1, 7), targets.reshape(-1))
    assert float(transposed(logits, targets)) == pytest.approx(float(flat))
    assert identify_loss(lambda o, y: nn.functional.cross_entropy(o.transpose(1, 2), y), logits, targets) == (
        "cross_entropy"
    )


def test_a_healthy_language_model_is_called_healthy():
    report = train(rate=3e-3, steps=200).report()
    m = report.measurements
    assert m["task"] == "sequence" and m["n_classes"] == VOCAB and m["loss_kind"] == "cross_entropy"
    assert m["first_loss"] == pytest.approx(math.log(VOCAB), rel=0.1)  # an untrained model guesses near uniformly
    assert report.verdict == "healthy", str(report)
    assert m["future_token_effect"] == 0  # a causal model's outputs do not move with later tokens, to the bit
    # No reference exists for a label per position: the shuffled-labels check says it cannot judge, in the text
    # and in the JSON (its feature null), rather than read the model's accuracy alone as unlearnable labels.
    as_json = report.to_dict()
    assert "shuffled_labels" in as_json["not_judged"] and as_json["features"]["learnable_skill"] is None
    assert "shuffled_labels" in str(report)


def test_padding_positions_the_loss_ignores_are_left_out():
    training, validation = data(200, pad=True)
    assert bool((training[0][1] == -100).any())  # the first batch, where the task is read, holds padding
    doctor = train(rate=3e-3, steps=200, pad=True, budget=None)  # every step watched: every label counted
    report = doctor.report()
    m = report.measurements
    with torch.no_grad():
        hits = kept = loss_sum = 0
        for x, y in validation:
            keep, logits = y != -100, doctor.model(x)
            hits += int((logits.argmax(dim=2)[keep] == y[keep]).sum())
            kept += int(keep.sum())
            loss_sum += float(nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum"))
    assert m["final_val_acc"] == pytest.approx(hits / kept)  # scored on the kept positions only
    assert m["final_val_loss"] == pytest.approx(loss_sum / kept, rel=1e-4)  # the mean over the kept positions
    labels = torch.cat([y.reshape(-1) for _, y in training])
    counts = torch.bincount(labels[labels != -100], minlength=VOCAB).double()
    assert m["majority_share"] == pytest.approx(float(counts.max() / counts.sum()))  # -100 is no class
    assert m["loss_kind"] == "cross_entropy" and math.isfinite(m["confident_disagreement"])
    assert report.verdict == "healthy", str(report)


class Peek(nn.Module):
    """Logits that give each position's next input token a margin of 5: the answer read from later in the window.

    The last position has no later token to read: its logits are all 0, a uniform guess. One parameter, unused by
    the output, lets an optimizer step.
    """

    MARGIN = 5.0

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*tokens.shape, VOCAB) + 0 * self.unused
        logits[:, :-1] = self.MARGIN * nn.functional.one_hot(tokens[:, 1:], VOCAB).float()
        return logits


def test_the_future_token_effect_is_how_far_the_earlier_outputs_move_over_their_rms():
    training, _ = data(20, pad=False)
    model = Peek()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn, budget=None)
    for x, y in doctor.watch(training):
        loss = loss_fn(model(x).reshape(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    report = doctor.report()
    # By hand: before the window's middle each position's logits are one 5 among VOCAB zeros (RMS 5 / 16), and the
    # position just before the middle reads a changed token: its 5 moves to another logit, a change of 5.
    assert report.measurements["future_token_effect"] == pytest.approx(math.sqrt(VOCAB))
    assert report.verdict == "future_visible", str(report)
    assert "causal mask" in str(report)


@pytest.mark.parametrize(
    "generated",
    [True, pytest.param(False, marks=pytest.mark.slow)],  # the standard library's text: evaluation data
    ids=["generated_text", "stdlib_text"],
)
def test_a_model_that_sees_later_tokens_is_named(generated):
    # The copy is learned abruptly, between steps 150 and 250 on the generated text; the probe reads the model, not
    # the loss, so 40 steps, long before the copy is learned, show it.
    report = train(rate=3e-3, steps=40, causal=False, generated=generated).report()
    assert report.measurements["future_token_effect"] > 0.01
    assert report.verdict == "future_visible", str(report)
    assert "causal mask" in str(report)


def test_a_causal_model_s_outputs_do_not_move_with_later_tokens_once_trained():
    report = train(rate=3e-3, steps=200, generated=True).report()
    assert report.measurements["future_token_effect"] == 0
    assert report.verdict != "future_visible", str(report)


def test_a_diverging_rate_is_named():
    report = train(rate=1.0, steps=200).report()
    assert report.verdict == "lr_too_high", str(report)


def test_memorization_fits_whole_sequences_from_the_model_factory():
    doctor = train(rate=3e-3, steps=60, model_factory=TinyLM, memorize_steps=60, capacity_examples=32)
    report = doctor.report()
    m = report.measurements
    assert doctor.memorized_on == 16 and len(m["memorize_losses"]) == 3  # 16 sequences of CONTEXT tokens each
    assert all(math.isfinite(loss) for loss in m["memorize_losses"])
    # No capacity fit on a sequence task: nothing reads it there, and on a language model it cost the most.
    assert m["capacity_examples"] == 0 and math.isnan(m["capacity_score"])
    memorizes = next(c for c in report.checklist.checks if c.check == "it memorizes a few examples")
    assert memorizes.ok is not None and "ln V" in memorizes.detail


def test_a_label_outside_the_vocabulary_that_the_loss_does_not_ignore_is_refused():
    x, y = windows(text(TRAIN_FILES), BATCH, seed=0)
    y[0, 5] = -1  # the loss below ignores -100 only
    model = TinyLM()
    doctor = Doctor(model, torch.optim.Adam(model.parameters()), nn.CrossEntropyLoss())
    with pytest.raises(UnsupportedTask, match=r"class label -1 .* outside the model's 256 classes"):
        doctor.see((x, y))


def test_a_loop_that_shifts_its_targets_in_its_own_loss_is_refused_in_one_line():
    tokens = text(TRAIN_FILES)[: BATCH * (CONTEXT + 1)].reshape(BATCH, CONTEXT + 1)[:, :CONTEXT]
    model = TinyLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn)
    with pytest.raises(UnsupportedTask, match=r"against the next position's target, a shift made in the loop's own"):
        for x, y in doctor.watch([(tokens, tokens)] * 3):  # the targets are the inputs: the loss below shifts them
            logits = model(x)
            loss = loss_fn(logits[:, :-1].reshape(-1, VOCAB), y[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    assert doctor.steps == 0  # refused at the first step's backward, before any step was counted
