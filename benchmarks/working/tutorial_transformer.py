"""pytorch/tutorials transformer tutorial: a causal nn.TransformerEncoder language model, next-token prediction.

Design kept (beginner_source/transformer_tutorial.py): TransformerModel = Embedding(ntokens, 200) scaled by
sqrt(200), sinusoidal positional encoding with dropout 0.2, nn.TransformerEncoder of 2
nn.TransformerEncoderLayer(200, 2 heads, feed-forward 200, dropout 0.2) (post-norm, ReLU, sequence first),
Linear(200, ntokens); embedding and decoder weights uniform in +-0.1, decoder bias 0; a square subsequent mask
(-inf above the diagonal) so each position sees only earlier ones; the model outputs (seq, batch, ntokens) and
the loop flattens it to (seq x batch, ntokens) for nn.CrossEntropyLoss; torch.optim.SGD at lr 5.0 and
StepLR(step_size 1.0, gamma 0.95) stepped once per epoch; the corpus laid out in 20 columns (batchify), read in
chunks of bptt 35 with the targets the next tokens; per step optimizer.zero_grad(), forward, backward,
clip_grad_norm_ at 0.5, optimizer.step(); after each epoch the validation loss on the validation text laid out
in 10 columns (eval mode, no_grad), the best one noted; 3 epochs.
Changed: the data: Wikitext-2 words (a download through torchtext) -> the bytes of the standard library's source
(stdlib_bytes, a vocabulary of 256 byte values), 70000 bytes of training text (100 chunks of 35 x 20 per epoch;
Wikitext-2 gives about 2980) and 14000 of validation text from files never trained on. The mask travels with
each chunk, (data, mask, targets), so that the model is called on a batch as the loop calls it; the tutorial
builds it in the loop (for bptt, and again for a shorter last chunk): the same mask. The test-set evaluation
after training is left out (it does not touch training; common.py keeps no test split).
"""

import math

import torch
from common import epochs, stdlib_bytes
from torch import nn

SOURCE = "pytorch/tutorials beginner_source/transformer_tutorial.py @ e5f60c64367b2ff3c19e5b73a2c7eac4bf1269f1"
NTOKENS, EMSIZE, NHID, NLAYERS, NHEAD, DROPOUT = 256, 200, 200, 2, 2, 0.2
LR, GAMMA, CLIP, EPOCHS, BATCH_SIZE, EVAL_BATCH_SIZE, BPTT = 5.0, 0.95, 0.5, 3, 20, 10, 35
TRAIN_BYTES, VALID_BYTES = 70_000, 14_000
loss = nn.CrossEntropyLoss()


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    """The token stream cut into bsz equal columns: (length // bsz, bsz)."""
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


TRAIN_DATA = batchify(stdlib_bytes("train", TRAIN_BYTES), BATCH_SIZE)
VAL_DATA = batchify(stdlib_bytes("validation", VALID_BYTES), EVAL_BATCH_SIZE)


class PositionalEncoding(nn.Module):
    """Adds sines and cosines of the position at geometric frequencies, then dropout."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(1))  # (max_len, 1, d_model): sequence first

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0)])


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ninp = ninp
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, src, src_mask):
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        return self.decoder(self.transformer_encoder(src, src_mask))


def square_subsequent_mask(size: int) -> torch.Tensor:
    """0 on and below the diagonal, -inf above: position i attends to positions <= i."""
    return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def chunks(source: torch.Tensor):
    """(data, mask, targets) for each chunk of bptt rows."""
    mask = square_subsequent_mask(BPTT)
    for i in range(0, source.size(0) - 1, BPTT):
        data, targets = get_batch(source, i)
        if data.size(0) != BPTT:
            mask = square_subsequent_mask(data.size(0))
        yield data, mask, targets


def model() -> nn.Module:
    return TransformerModel(NTOKENS, EMSIZE, NHEAD, NHID, NLAYERS, DROPOUT)


def batches():
    return list(chunks(TRAIN_DATA))


def validation():
    return list(chunks(VAL_DATA))


def optimizer(params):
    return torch.optim.SGD(params, lr=LR)


def evaluate(net: TransformerModel, source: torch.Tensor) -> float:
    net.eval()
    total = 0.0
    with torch.no_grad():
        for data, mask, targets in chunks(source):
            output = net(data, mask)
            total += len(data) * loss(output.view(-1, NTOKENS), targets).item()
    return total / (len(source) - 1)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1.0, gamma=GAMMA)
    doctor = Doctor(net, opt, loss, validation=validation())
    best_val_loss = float("inf")
    for _ in range(epochs(EPOCHS)):
        net.train()
        for data, mask, targets in doctor.watch(chunks(TRAIN_DATA)):
            opt.zero_grad()
            output = net(data, mask)
            step_loss = loss(output.view(-1, NTOKENS), targets)
            step_loss.backward()
            doctor.after_backward(step_loss)
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
        val_loss = evaluate(net, VAL_DATA)
        best_val_loss = min(best_val_loss, val_loss)  # the tutorial keeps the best model for its test split
        scheduler.step()
    return doctor
