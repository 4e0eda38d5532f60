"""TrainCheck pytorch-84803, buggy: two data-parallel processes whose transfers lose data: 1% of them arrive zeroed.

Upstream issue: https://github.com/pytorch/pytorch/issues/84803 (data loss in data-parallel training on machines with
several RTX 4090 cards: a bad peer-to-peer setup corrupts what the GPUs send each other); TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/pytorch-84803 (translation.py, run by run_translate.sh: the Hugging Face
translation example fine-tuning M2M100 on English to Romanian). The fault is the hardware's, so TrainCheck injects it:
translation.py patches all_reduce, all_gather, send, recv, isend, irecv and Tensor.to so that each call, with
probability 1% (Python's random), first zeroes the tensor it carries (and, again with probability 1%, that tensor's
.grad). Here the same injection (a 1% draw per call, the tensor zeroed in place before it is sent) sits at every such
call the program makes: each parameter and buffer as the model is moved to its device, each batch tensor as it is
moved to the device (training and evaluation), each gradient bucket DDP all-reduces (a communication hook: the zeroed
bucket is this rank's share of the average), and each all_gather of the evaluation figures. The program sends no
point-to-point messages. Fix (fixed.py): the same program on a machine whose transfers work.

Two facts of the upstream run, kept as notes: run_translate.sh starts one process (`python translation.py`: on a
machine with several GPUs the Trainer then uses DataParallel, which makes none of the patched calls), and the patched
collectives call the patched name again (an endless recursion had they been called), so upstream only the Tensor.to
injection fires: on the model's tensors as the model is moved, on every batch, and on the .to calls inside the
transformers model (masks, positions), which this port's model does not make. The port runs the data-parallel training
of the issue as two processes, where the collectives' injection fires as intended.

Design kept (run_translate.sh, the Seq2SeqTrainer's defaults; the model as in transformers-33844's port, which
fine-tunes the same M2M100 with the same script): an encoder-decoder transformer translating a source sequence into a
target sequence (pre-norm layers: self-attention, cross-attention in the decoder, a ReLU feed-forward, dropout 0.1 and
attention dropout 0.1, sinusoidal positions, scaled embeddings, a final layer norm), teacher forcing with the target
shifted right behind a start token, cross-entropy over the target tokens; AdamW without weight decay, the rate
decaying linearly to 0, gradients clipped to norm 1, batch size 4 per device, 10 epochs, an evaluation pass after
every epoch (eval mode, no_grad) on 100 held-out pairs, each process evaluating its share and the per-batch figures
gathered from both (the Trainer's evaluation loop); data-parallel training: every process holds a replica wrapped in
DistributedDataParallel (which averages the gradients with all_reduce), reads its own shard of the shuffled training
set (DistributedSampler) and moves each batch to its device.

Changed: WMT16 en-ro and the pretrained 418M-parameter M2M100 -> a made-up language pair from the standard library's
source text (source: 16 bytes of a line; target: the same bytes under a fixed substitution, in reverse order), 1000
training pairs instead of 100 (as transformers-33844's port: a model trained from scratch learns little from 100), a
2+2-layer model of width 64 trained from scratch at rate 1e-3 instead of the fine-tuning rate 5e-5; the generation
pass (predict_with_generate) left out; two gloo processes on the CPU instead of the GPUs, the "device" being the CPU
(benchmarks/realbugs/traincheck/ranks.py: rank 0 in the runner's process under the doctor, rank 1 started by the
recipe); the injection's draws from a random.Random of each rank's own, seeded from the run's seed.
"""

import math
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from benchmarks.realbugs.traincheck import ranks
from benchmarks.realbugs.traincheck.common import epochs
from benchmarks.working.common import stdlib_bytes

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/pytorch-84803/"
    "translation.py @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS, LENGTH, N_TRAIN, N_EVAL, MAX_NORM = 4, 1e-3, 10, 16, 1000, 100, 1.0
LOSS_RATE = 0.01  # the share of transfers that arrive zeroed (TrainCheck's injection)
WIDTH, HEADS, FFN, LAYERS, DROPOUT, ATTENTION_DROPOUT = 64, 4, 128, 2, 0.1, 0.1
START, VOCAB = 256, 257  # the bytes, then the decoder's start token
SUBSTITUTION = torch.randperm(256, generator=torch.Generator().manual_seed(84803))  # the "language": fixed
DEVICE = torch.device("cpu")


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


class Attention(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.dropout, self.causal = ATTENTION_DROPOUT, causal

    def forward(self, x, memory=None):
        memory = x if memory is None else memory
        b, t, _ = x.shape

        def heads(h):
            return h.view(b, -1, HEADS, WIDTH // HEADS).transpose(1, 2)

        h = F.scaled_dot_product_attention(
            heads(self.q(x)),
            heads(self.k(memory)),
            heads(self.v(memory)),
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal,
        )
        return self.out(h.transpose(1, 2).reshape(b, t, WIDTH))


class Layer(nn.Module):
    """A pre-norm transformer layer: self-attention, then (decoder) cross-attention, then a ReLU feed-forward."""

    def __init__(self, decoder=False):
        super().__init__()
        self.self_attn, self.self_norm = Attention(causal=decoder), nn.LayerNorm(WIDTH)
        self.cross_attn = Attention() if decoder else None
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
    """The whole training set as one process would read it (the two ranks read shards of it: shard())."""
    return DataLoader(TRAIN, batch_size=BATCH_SIZE, shuffle=True)


def validation():
    return DataLoader(EVAL, batch_size=BATCH_SIZE)


def optimizer(params):
    return torch.optim.AdamW(params, lr=RATE, weight_decay=0.0)


def shard(data: TensorDataset, rank: int, seed: int, shuffle: bool) -> DataLoader:
    """The rank's share of `data` (the Trainer's DistributedSampler: the same shuffle on every rank, cut in two)."""
    sampler = DistributedSampler(data, num_replicas=ranks.WORLD_SIZE, rank=rank, shuffle=shuffle, seed=seed)
    return DataLoader(data, batch_size=BATCH_SIZE, sampler=sampler)


class LossyLink:
    """The machine's faulty transfers: each call, with probability `rate`, zeroes the tensor it carries first.

    As TrainCheck's patch: one draw for the tensor, and one more for its .grad when it has one; counted per kind.
    """

    def __init__(self, rate: float, seed: int):
        self.rate, self.random = rate, random.Random(seed)
        self.calls: dict[str, int] = {}
        self.zeroed: dict[str, int] = {}

    def corrupt(self, tensor: torch.Tensor, kind: str) -> torch.Tensor:
        for part in (tensor.data, tensor.grad):
            if part is None:
                continue
            self.calls[kind] = self.calls.get(kind, 0) + 1
            if self.random.random() < self.rate:
                part.zero_()  # the bug: the data is lost on the way
                self.zeroed[kind] = self.zeroed.get(kind, 0) + 1
        return tensor

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.corrupt(tensor, "to").to(DEVICE)

    def move(self, net: nn.Module) -> nn.Module:
        """The model moved to the device: each parameter and buffer is a transfer of its own (Module.to)."""
        for tensor in [*net.parameters(), *net.buffers()]:
            self.corrupt(tensor, "to")
        return net.to(DEVICE)

    def all_gather(self, gathered: list[torch.Tensor], tensor: torch.Tensor) -> None:
        dist.all_gather(gathered, self.corrupt(tensor, "all_gather"))


def lossy_all_reduce(link: LossyLink, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's gradient averaging (a communication hook) through the faulty link: the bucket may be zeroed first."""
    tensor = link.corrupt(bucket.buffer(), "all_reduce").div_(ranks.WORLD_SIZE)
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda done: done.value()[0])


def evaluate(net, loader, link: LossyLink) -> tuple[float, float]:
    """The evaluation pass after each epoch: each rank its share, the per-batch figures gathered from both ranks."""
    net.eval()
    gathered = []
    with torch.no_grad():
        for batch in loader:
            source, decoder_input, labels = (link.to_device(t) for t in batch)
            logits = net(source, decoder_input)
            correct = (logits.argmax(1) == labels.reshape(-1)).sum()
            figures = torch.stack([loss(logits, labels), correct.float(), torch.tensor(float(labels.numel()))])
            both = [torch.empty_like(figures) for _ in range(ranks.WORLD_SIZE)]
            link.all_gather(both, figures)
            gathered += both
    figures = torch.stack(gathered)
    return float(figures[:, 0].mean()), float(figures[:, 1].sum() / figures[:, 2].sum())


def program(rank: int, seed: int, Doctor=None):
    """One rank of the data-parallel run; rank 0 is watched by the doctor (it gets the module, not the wrapper)."""
    link = LossyLink(LOSS_RATE, seed + rank)  # the bug: 1% of the transfers lose their data
    net = link.move(model())
    replica = DistributedDataParallel(net)  # rank 0's weights copied to rank 1, the gradients averaged
    replica.register_comm_hook(link, lossy_all_reduce)
    opt = optimizer(replica.parameters())
    train_dl, eval_dl = shard(TRAIN, rank, seed, shuffle=True), shard(EVAL, rank, seed, shuffle=False)
    total = epochs(EPOCHS) * len(train_dl)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / total))
    doctor = Doctor(net, opt, loss, validation=validation()) if Doctor is not None else ranks.Unwatched()
    steps, evaluation = 0, (math.nan, math.nan)
    for epoch in range(epochs(EPOCHS)):
        train_dl.sampler.set_epoch(epoch)
        net.train()
        for batch in doctor.watch(train_dl):
            source, decoder_input, labels = (link.to_device(t) for t in batch)
            opt.zero_grad()
            batch_loss = loss(replica(source, decoder_input), labels)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM)
            opt.step()
            schedule.step()
            steps += 1
        evaluation = evaluate(net, eval_dl, link)
    ranks.record(net, steps=steps, evaluation=evaluation, calls=link.calls, zeroed=link.zeroed)
    return doctor


def rank1(seed: int) -> None:
    """Rank 1, in the process ranks.two_ranks starts: its own dropout and the shared shuffle."""
    torch.manual_seed(seed + 1)
    program(1, seed)


def train(Doctor):
    seed = int(torch.randint(2**31 - 1, ()))  # drawn from the run's seed: the shuffle both ranks share
    with ranks.two_ranks(__file__, "rank1", seed):
        return program(0, seed, Doctor)
