"""pytorch/examples word_language_model: a 2-layer LSTM language model, trained by truncated back-propagation.

Design kept (word_language_model/main.py and model.py, the default LSTM): RNNModel = Embedding(ntokens, 200)
with dropout 0.2, nn.LSTM(200, 200, 2 layers, dropout 0.2), dropout 0.2, Linear(200, ntokens) flattened to
(seq x batch, ntokens) and log_softmax; embedding and decoder weights uniform in +-0.1, decoder bias 0;
weights not tied (--tied is off by default); nn.NLLLoss; the corpus laid out in 20 columns (batchify), read in
chunks of bptt 35 with the targets the next tokens; the hidden state carried across chunks and detached before
each (repackage_hidden), zeros at the start of each epoch; per step model.zero_grad(), forward, backward,
clip_grad_norm_ at 0.25, then plain SGD by hand at lr 20 (the example adds -lr * grad to each parameter:
torch.optim.SGD at the same lr, no momentum, takes the same step); after each epoch the validation loss on the
validation text laid out in 10 columns (eval mode, no_grad), and lr divided by 4 when it is not better than the
best so far.
Changed: the data, characters instead of words: Wikitext-2 words (a download, a vocabulary of 33278) -> the
bytes of the standard library's source (stdlib_bytes, a vocabulary of 256 byte values), 70000 bytes of training
text (100 chunks of 35 x 20 per epoch; Wikitext-2 gives 2983) and 14000 of validation text from files never
trained on. Epochs 40 -> 3 for CPU time (300 steps: a run with the doctor takes about 40 s on one thread). The
forward takes the hidden state as an optional argument (None: zeros, as init_hidden gives), so that the model
can be called on a chunk alone. The best model's save and the test-set evaluation after training are left
out (they do not touch training; common.py keeps no test split).
"""

import torch
import torch.nn.functional as F
from common import epochs, stdlib_bytes
from torch import nn

SOURCE = "pytorch/examples word_language_model/main.py @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
NTOKENS, EMSIZE, NHID, NLAYERS, DROPOUT, TIED = 256, 200, 200, 2, 0.2, False
LR, CLIP, EPOCHS, BATCH_SIZE, EVAL_BATCH_SIZE, BPTT = 20.0, 0.25, 3, 20, 10, 35
TRAIN_BYTES, VALID_BYTES = 70_000, 14_000
OUTPUT = 0  # the model returns (log-probabilities, hidden state); the loss reads the first
loss = nn.NLLLoss()


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    """The token stream cut into bsz equal columns: (length // bsz, bsz)."""
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


TRAIN_DATA = batchify(stdlib_bytes("train", TRAIN_BYTES), BATCH_SIZE)
VAL_DATA = batchify(stdlib_bytes("validation", VALID_BYTES), EVAL_BATCH_SIZE)


class RNNModel(nn.Module):
    """Encoder, recurrent module, decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("tied weights need nhid == emsize")
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden=None):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """The hidden state cut from the graph that made it."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def chunks(source: torch.Tensor):
    for i in range(0, source.size(0) - 1, BPTT):
        yield get_batch(source, i)


def model() -> nn.Module:
    return RNNModel(NTOKENS, EMSIZE, NHID, NLAYERS, DROPOUT, TIED)


def batches():
    return list(chunks(TRAIN_DATA))


def validation():
    return list(chunks(VAL_DATA))


def optimizer(params):
    return torch.optim.SGD(params, lr=LR)


def evaluate(net: RNNModel, source: torch.Tensor) -> float:
    net.eval()
    total = 0.0
    hidden = net.init_hidden(EVAL_BATCH_SIZE)
    with torch.no_grad():
        for data, targets in chunks(source):
            output, hidden = net(data, hidden)
            hidden = repackage_hidden(hidden)
            total += len(data) * loss(output, targets).item()
    return total / (len(source) - 1)


def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss, validation=validation())
    lr, best_val_loss = LR, None
    for _ in range(epochs(EPOCHS)):
        net.train()
        hidden = net.init_hidden(BATCH_SIZE)
        for data, targets in doctor.watch(chunks(TRAIN_DATA)):
            hidden = repackage_hidden(hidden)
            net.zero_grad()
            output, hidden = net(data, hidden)
            step_loss = loss(output, targets)
            step_loss.backward()
            doctor.after_backward(step_loss)
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
        val_loss = evaluate(net, VAL_DATA)
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0
            for group in opt.param_groups:
                group["lr"] = lr
    return doctor
