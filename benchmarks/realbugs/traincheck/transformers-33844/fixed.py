"""TrainCheck transformers-33844, fixed: the attention drops nothing in eval mode.

Upstream issue: https://github.com/huggingface/transformers/pull/33844; TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/transformers-33844 (run_translate.sh fine-tunes M2M100 on English to
Romanian with the FlashAttention-2 attention). The FlashAttention-2 attention of M2M100 (and of the models that
copied it from Bart) passed its attention-dropout rate to the kernel whatever the module's mode, so model.eval()
did not turn that dropout off: evaluation and prediction see a randomly thinned attention, their outputs change
from run to run and the scores drop (buggy.py). The fix (the pull request), as here: the attention-dropout rate is
0 when the module is not training.

Design kept: an encoder-decoder transformer translating a source sequence into a target sequence (pre-norm layers:
self-attention, cross-attention in the decoder, a ReLU feed-forward, dropout 0.1 and attention dropout 0.1, as
M2M100's configuration; sinusoidal positions, scaled embeddings, a final layer norm), teacher forcing with the
target shifted right behind a start token, cross-entropy over the target tokens; the Trainer's defaults: AdamW
without weight decay, the rate decaying linearly to 0, batch size 4, 10 epochs, an evaluation pass after every
epoch (eval mode, no_grad) on 100 held-out pairs. Changed: WMT16 en-ro and the pretrained 418M-parameter M2M100 ->
a made-up language pair from the standard library's source text (source: 16 bytes of a line; target: the same bytes
under a fixed substitution, in reverse order), 1000 training pairs, and a 2+2-layer model of width 64 trained from
scratch, at rate 1e-3 instead of the fine-tuning rate 5e-5; the attention is computed by
F.scaled_dot_product_attention (its dropout_p plays the FlashAttention kernel's dropout) on the CPU.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.realbugs.traincheck.common import epochs
from benchmarks.working.common import stdlib_bytes

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/transformers-33844/"
    "run_translate.sh @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS, LENGTH, N_TRAIN, N_EVAL = 4, 1e-3, 10, 16, 1000, 100
WIDTH, HEADS, FFN, LAYERS, DROPOUT, ATTENTION_DROPOUT = 64, 4, 128, 2, 0.1, 0.1
START, VOCAB = 256, 257  # the bytes, then the decoder's start token
SUBSTITUTION = torch.randperm(256, generator=torch.Generator().manual_seed(33844))  # the "language": fixed


def pairs(split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n (source, target) pairs: LENGTH bytes of standard-library source and their translation."""
    text = stdlib_bytes(split, n * LENGTH)
    source = text[: n * LENGTH].view(n, LENGTH)
    return source, SUBSTITUTION[source].flip(1)


def examples(split: str, n: int) -> TensorDataset:
    """(source, decoder input, labels): the decoder reads the target shifted right behind the start token."""
    source, target = pairs(split, n)
    decoder_input = torch.cat([torch.full((n, 1), START), target[:, :-1]], dim=1)
    return TensorDataset(source, decoder_input, target)


TRAIN, EVAL = examples("train", N_TRAIN), examples("validation", N_EVAL)


def flat_cross_entropy(logits, labels):
    """Cross-entropy over every target token: (B * T, V) logits against (B, T) or (B * T,) labels."""
    return F.cross_entropy(logits, labels.reshape(-1))


loss = flat_cross_entropy
INPUTS = (0, 1)  # the model reads the source and the decoder input


def TARGETS(batch):
    """The labels, one row per target token as the model's output has (the loss flattens them the same way)."""
    return batch[2].reshape(-1)


class FlashAttention(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.dropout, self.causal = ATTENTION_DROPOUT, causal

    def forward(self, x, memory=None):
        memory = x if memory is None else memory
        b, t, _ = x.shape

        def heads(h):
            return h.view(b, -1, HEADS, WIDTH // HEADS).transpose(1, 2)

        dropout = self.dropout if self.training else 0.0  # the fix: no dropout in eval mode
        h = F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(memory)), heads(self.v(memory)), dropout_p=dropout, is_causal=self.causal
        )
        return self.out(h.transpose(1, 2).reshape(b, t, WIDTH))


class Layer(nn.Module):
    """A pre-norm transformer layer: self-attention, then (decoder) cross-attention, then a ReLU feed-forward."""

    def __init__(self, decoder=False):
        super().__init__()
        self.self_attn, self.self_norm = FlashAttention(causal=decoder), nn.LayerNorm(WIDTH)
        self.cross_attn = FlashAttention() if decoder else None
        self.cross_norm = nn.LayerNorm(WIDTH) if decoder else None
        self.ffn = nn.Sequential(nn.Linear(WIDTH, FFN), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(FFN, WIDTH))
        self.ffn_norm, self.drop = nn.LayerNorm(WIDTH), nn.Dropout(DROPOUT)

    def forward(self, x, memory=None):
        x = x + self.drop(self.self_attn(self.self_norm(x)))
        if self.cross_attn is not None:
            x = x + self.drop(self.cross_attn(self.cross_norm(x), memory))
        return x + self.drop(self.ffn(self.ffn_norm(x)))


def sinusoids(length: int) -> torch.Tensor:
    position = torch.arange(length).unsqueeze(1)
    rates = torch.exp(torch.arange(0, WIDTH, 2) * (-math.log(10000.0) / WIDTH))
    table = torch.zeros(length, WIDTH)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
    return table


class Translator(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.register_buffer("positions", sinusoids(LENGTH + 1), persistent=False)
        self.encoder = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.decoder = nn.ModuleList(Layer(decoder=True) for _ in range(LAYERS))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.drop = nn.Dropout(DROPOUT)
        self.lm_head = nn.Linear(WIDTH, VOCAB)

    def embedded(self, tokens):
        return self.drop(self.embed(tokens) * math.sqrt(WIDTH) + self.positions[: tokens.shape[1]])

    def forward(self, source, decoder_input):
        memory = self.embedded(source)
        for layer in self.encoder:
            memory = layer(memory)
        memory = self.encoder_norm(memory)
        x = self.embedded(decoder_input)
        for layer in self.decoder:
            x = layer(x, memory)
        return self.lm_head(self.decoder_norm(x)).reshape(-1, VOCAB)  # (B * T, V): one row per target token


def model() -> nn.Module:
    return Translator()


def batches():
    return DataLoader(TRAIN, batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(EVAL, batch_size=BATCH_SIZE)


def optimizer(params):
    return torch.optim.AdamW(params, lr=RATE, weight_decay=0.0)


def evaluate(net, loader) -> float:
    """The evaluation pass after each epoch: the token accuracy on the held-out pairs."""
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for source, decoder_input, labels in loader:
            correct += (net(source, decoder_input).argmax(1) == labels.reshape(-1)).sum().item()
            total += labels.numel()
    return correct / total


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    train_dl, eval_dl = batches(), validation()
    total = epochs(EPOCHS) * len(train_dl)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / total))
    doctor = Doctor(net, opt, loss, validation=eval_dl)
    for _ in range(epochs(EPOCHS)):
        net.train()
        for source, decoder_input, labels in doctor.watch(train_dl):
            opt.zero_grad()
            batch_loss = loss(net(source, decoder_input), labels)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
            schedule.step()
        evaluate(net, eval_dl)
    return doctor
