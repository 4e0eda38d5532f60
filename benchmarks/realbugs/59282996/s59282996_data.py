"""Stack Overflow 59282996's data and network, shared by buggy.py and fixed.py.

Data: dataset.npz here holds the training arrays of DeepFD's dataset.pkl (ArabelaTso/DeepFD
Benchmark/Subjects/59282996/epoch_30/dataset.pkl, keys x and y; the same numbers are written out in origin.py):
10 sequences of 20 timesteps with 5 features, one label per timestep (0 = padding, 1, 2). The original builds
them with x.reshape((20, 5)) from (5, 20) arrays: a reshape, not a transpose, so the zero padding lands inside
the sequences and Masking(mask_value=0.) hides scattered timesteps (3 to 16 of 20 stay visible per sequence)
while most padded timesteps with label 0 stay visible. That is the "training data quality" fault; both recipes
keep it, as the fixed program does.

Network (Keras): Masking(0.) -> Bidirectional(LSTM(20, return_sequences=True)) -> Dropout(0.2) ->
TimeDistributed(Dense(C, sigmoid)). Ported as a masked bidirectional LSTM written out step by step, because
Keras's masking skips a masked timestep inside the sequence (state and output carried over from the previous
step), which nn.LSTM's packed sequences (trailing padding only) cannot express. Keras LSTM initialization:
glorot-uniform input kernel, orthogonal recurrent kernel, zero bias with the forget gate's at 1; PyTorch's sigmoid
recurrent activation (Keras 2.3 standalone defaults to hard_sigmoid, tf.keras to sigmoid).

Targets: per timestep a float one-hot row (the sigmoid does not pair with sparse_categorical_crossentropy, so the
loss works on probabilities), and an all-zero row for a masked timestep. `masked_crossentropy` is Keras's
sparse_categorical_crossentropy on probabilities (log of the clipped output, renormalized, which is
kerasport.categorical_crossentropy) with Keras's mask: the mean over the visible timesteps only.
"""

from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.realbugs.kerasport import EPSILON

_data = np.load(Path(__file__).with_name("dataset.npz"))
X = torch.from_numpy(_data["x"].astype(np.float32))  # (10, 20, 5)
LABELS = torch.from_numpy(_data["y"])  # (10, 20): 0 padding, 1, 2
MASK = (X != 0).any(dim=-1)  # Keras Masking(mask_value=0.): a timestep whose features are all 0


def targets(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """Float one-hot (N, T, classes), all-zero rows where the input timestep is masked."""
    return nn.functional.one_hot(labels, classes).float() * MASK.unsqueeze(-1)


def masked_crossentropy(probabilities: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """Keras sparse_categorical_crossentropy on a sigmoid's outputs, averaged over visible timesteps only."""
    p = (probabilities / probabilities.sum(dim=-1, keepdim=True)).clamp(EPSILON, 1 - EPSILON)
    per_step = -(onehot * p.log()).sum(dim=-1)
    visible = onehot.sum(dim=-1)  # 1 where the timestep is visible, 0 where masked
    return (per_step * visible).sum() / visible.sum()


def keras_lstm_cell(n_in: int, hidden: int) -> nn.LSTMCell:
    cell = nn.LSTMCell(n_in, hidden)  # gates i, f, g, o: Keras's order i, f, c, o
    with torch.no_grad():
        nn.init.xavier_uniform_(cell.weight_ih)
        nn.init.orthogonal_(cell.weight_hh)
        cell.bias_ih.zero_()
        cell.bias_hh.zero_()
        cell.bias_ih[hidden : 2 * hidden] = 1.0  # unit_forget_bias=True
    return cell


class MaskedBiLSTMTagger(nn.Module):
    """Masking -> Bidirectional(LSTM, return_sequences) -> Dropout(0.2) -> per-timestep Dense + sigmoid."""

    def __init__(self, n_in: int = 5, hidden: int = 20, classes: int = 3):
        super().__init__()
        self.forward_cell, self.backward_cell = keras_lstm_cell(n_in, hidden), keras_lstm_cell(n_in, hidden)
        self.dropout = nn.Dropout(0.2)
        self.dense = nn.Linear(2 * hidden, classes)
        nn.init.xavier_uniform_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)
        self.sigmoid = nn.Sigmoid()  # kept: the loss takes probabilities

    def run(self, cell, x, mask, steps):
        h = x.new_zeros(x.shape[0], cell.hidden_size)
        c, outputs = h, [None] * x.shape[1]
        for t in steps:
            h_new, c_new = cell(x[:, t], (h, c))
            keep = mask[:, t].unsqueeze(-1)
            h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)  # a masked step carries the state
            outputs[t] = h
        return torch.stack(outputs, dim=1)

    def forward(self, x):
        mask, steps = (x != 0).any(dim=-1), range(x.shape[1])
        forward = self.run(self.forward_cell, x, mask, steps)
        backward = self.run(self.backward_cell, x, mask, reversed(steps))  # Keras reverses inputs and mask
        both = torch.cat([forward, backward], dim=-1)
        return self.sigmoid(self.dense(self.dropout(both)))
