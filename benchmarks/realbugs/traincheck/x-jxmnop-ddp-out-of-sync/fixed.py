"""TrainCheck x-jxmnop-ddp-out-of-sync, fixed: the model always runs through one DDP wrapper, so replicas stay equal.

Upstream report: https://x.com/jxmnop/status/1778520637193240892 (with the Hugging Face Trainer on several GPUs, the
model is sometimes a plain nn.Module and sometimes wrapped in DistributedDataParallel); TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/x-jxmnop-ddp-out-of-sync (bug.py, its TrainCheck configuration's program;
run_bug_short.sh runs the same program on two GPUs). A Trainer subclass trains BERT with a contrastive loss on STS-B
sentence pairs, one process per GPU, but its training_step runs the model chosen by get_model_ddp_or_not(step): the
plain module on even steps, a DistributedDataParallel wrapper built anew on odd ones, so on the even steps the
gradients are never averaged and the replicas drift apart (buggy.py). The fix (the report's advice, as TrainCheck's
correct.py does on a toy model): always run the model through DDP, here through one wrapper built before training (the
Trainer's own), so every step averages the gradients and the replicas stay identical.

TrainCheck's table (silent-issue-detection/README.md) scores this subject on pytorch-104336's trace (the same desync,
from another cause; not ported here: it needs CUDA); what is ported here is the folder's own bug.py.

Design kept: an encoder (BERT: learned token and position embeddings with a layer norm, post-norm layers of
self-attention over the unmasked tokens and a GELU feed-forward, dropout 0.1) read by averaging its last hidden states
over every position, padding included; each sentence pair tokenized as [CLS] s1 [SEP] s2 [SEP], truncated
longest-first and padded to a fixed length, with its attention mask; the contrastive loss: cross-entropy over the
batch's dot-product similarities, the labels (0 .. B/2 - 1) twice over; AdamW built by the subclass (lr of the
Trainer's arguments, PyTorch's default weight decay 0.01); batch size 8 per process, the Trainer's distributed sampler
(one shuffle, a shard per rank), one epoch; training_step zeroes the gradients, runs the chosen model, backpropagates
and steps, after which the Trainer's own loop clips the gradients to norm 1, steps the optimizer again on them, decays
the rate linearly to 0 and zeroes the gradients; every rank starts from the same weights (the same pretrained
checkpoint).

Changed: the pretrained bert-base-uncased -> a 2-layer encoder of width 64 on byte tokens trained from scratch,
without BERT's pooler (the loss never reads it) and segment embeddings (every token is segment 0 upstream), at rate
1e-3 instead of the Trainer's default 5e-5 (as transformers-33844's port); STS-B's 5749 training pairs -> 5744 pairs
of consecutive lines of the standard library's source (a multiple of 16, so that every batch has 8 pairs: the loss's
labels assume an even batch); length 128 -> 32 tokens (bytes: each line is cut to fit; the doctor's own fits on the
run's examples cost as much per token as the run); the tests' step cap (WORKING_EPOCH_CAP) counts steps, as
bug_short.py's max_steps=10 does; the similarities computed in the model's forward (so the doctor sees (B, B) logits
and the labels ride in the batch); two gloo processes on the CPU instead of the GPUs
(benchmarks/realbugs/traincheck/ranks.py: rank 0 in the runner's process under the doctor, rank 1 started here).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from benchmarks.realbugs.traincheck import ranks
from benchmarks.realbugs.traincheck.common import epochs
from benchmarks.working.common import stdlib_bytes

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads silent-issue-detection/bug-reprod-scripts/x-jxmnop-ddp-out-of-sync/"
    "bug.py @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS, MAX_NORM, N_PAIRS, MAX_LENGTH = 8, 1e-3, 1, 1.0, 5744, 32
WIDTH, HEADS, FFN, LAYERS, DROPOUT = 64, 4, 256, 2, 0.1
CLS, SEP, PAD, VOCAB = 256, 257, 258, 259  # the bytes, then the tokenizer's special tokens


def sentence_pairs(n: int) -> list[tuple[bytes, bytes]]:
    """The first n pairs of consecutive non-empty lines of standard-library source (STS-B's sentence1 and sentence2)."""
    text = bytes(stdlib_bytes("train", 600_000).tolist())
    lines = [line.strip() for line in text.split(b"\n")]
    lines = [line for line in lines if line]
    if len(lines) < 2 * n:
        raise ValueError(f"the corpus has {len(lines)} lines, {2 * n} are needed")
    return [(lines[2 * i], lines[2 * i + 1]) for i in range(n)]


def tokenize(first: bytes, second: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] first [SEP] second [SEP], the longer sentence trimmed first to fit, padded: (input ids, attention mask)."""
    first, second = list(first), list(second)
    while len(first) + len(second) > MAX_LENGTH - 3:
        if len(first) >= len(second):
            first.pop()
        else:
            second.pop()
    ids = [CLS, *first, SEP, *second, SEP]
    mask = [1] * len(ids) + [0] * (MAX_LENGTH - len(ids))
    return torch.tensor(ids + [PAD] * (MAX_LENGTH - len(ids))), torch.tensor(mask)


PAIRS = [tokenize(*pair) for pair in sentence_pairs(N_PAIRS)]


def collate(items):
    """A batch as the model takes it, with the contrastive labels: example i and example i + B/2 share a label."""
    half = torch.arange(len(items) // 2)
    return {
        "input_ids": torch.stack([ids for ids, _ in items]),
        "attention_mask": torch.stack([mask for _, mask in items]),
        "labels": torch.cat([half, half]),
    }


loss = nn.CrossEntropyLoss()


class Layer(nn.Module):
    """A BERT layer (post-norm): self-attention over the unmasked tokens, then a GELU feed-forward."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.ffn = nn.Sequential(nn.Linear(WIDTH, FFN), nn.GELU(), nn.Linear(FFN, WIDTH))
        self.attn_norm, self.ffn_norm, self.drop = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH), nn.Dropout(DROPOUT)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = (h.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2) for h in self.qkv(x).chunk(3, dim=-1))
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=DROPOUT if self.training else 0.0)
        x = self.attn_norm(x + self.drop(self.out(h.transpose(1, 2).reshape(b, t, WIDTH))))
        return self.ffn_norm(x + self.drop(self.ffn(x)))


class Contrastive(nn.Module):
    """The encoder, each example's embedding (the mean of its last hidden states), and their similarities."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(MAX_LENGTH, WIDTH)
        self.norm, self.drop = nn.LayerNorm(WIDTH), nn.Dropout(DROPOUT)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.norm(self.tokens(input_ids) + self.positions(positions)))
        keep = attention_mask.bool()[:, None, None, :]  # every query may attend to the sentence's real tokens
        for layer in self.layers:
            x = layer(x, keep)
        embeddings = x.mean(dim=1)  # over every position, padding included
        return embeddings @ embeddings.T  # (B, B): each example's similarity to every example of the batch


def model() -> nn.Module:
    return Contrastive()


def batches():
    """The whole training set as one process would read it (the two ranks read shards of it: shard())."""
    return DataLoader(PAIRS, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate)


def optimizer(params):
    return torch.optim.AdamW(params, lr=RATE)


def shard(rank: int, seed: int) -> DataLoader:
    """The rank's share of the pairs (the Trainer's DistributedSampler: one shuffle on every rank, cut in two)."""
    sampler = DistributedSampler(PAIRS, num_replicas=ranks.WORLD_SIZE, rank=rank, shuffle=True, seed=seed)
    return DataLoader(PAIRS, batch_size=BATCH_SIZE, sampler=sampler, collate_fn=collate)


def program(rank: int, seed: int, Doctor=None):
    """One rank of the run; rank 0 is watched by the doctor (it gets the module, never a wrapper)."""
    net = model()
    ranks.share_weights(net)  # the same starting weights on both ranks (upstream: the same pretrained checkpoint)
    replica = DistributedDataParallel(net)  # the fix: one wrapper, run on every step
    opt = optimizer(net.parameters())
    loader = shard(rank, seed)
    total = epochs(EPOCHS * len(loader))  # the Trainer's max_steps: one epoch (a cap of the tests counts steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / total))
    doctor = Doctor(net, opt, loss) if Doctor is not None else ranks.Unwatched()
    step, losses = 0, []  # the Trainer's global_step: the batches done so far
    for epoch in range(EPOCHS):
        loader.sampler.set_epoch(epoch)
        net.train()
        for batch in doctor.watch(loader):
            if step == total:
                break
            # training_step
            opt.zero_grad()
            batch_loss = loss(replica(batch["input_ids"], batch["attention_mask"]), batch["labels"])
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
            # the Trainer's loop after training_step: clip, step again on the same gradients, decay, clear
            torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM)
            opt.step()
            schedule.step()
            net.zero_grad()
            step += 1
            losses.append(batch_loss.item())
    ranks.record(net, steps=step, final_loss=sum(losses[-20:]) / max(1, len(losses[-20:])))  # the last 20 steps
    return doctor


def rank1(seed: int) -> None:
    """Rank 1, in the process ranks.two_ranks starts: its own dropout and the shared shuffle."""
    torch.manual_seed(seed + 1)
    program(1, seed)


def train(Doctor):
    seed = int(torch.randint(2**31 - 1, ()))  # drawn from the run's seed: the shuffle both ranks share
    with ranks.two_ranks(__file__, "rank1", seed):
        return program(0, seed, Doctor)
