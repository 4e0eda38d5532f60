"""The data of Stack Overflow 31556268: XOR, the four rows written in the program, and its 2-4-1 sigmoid network."""

import torch
from torch import nn

from benchmarks.realbugs.kerasport import dense

X = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
Y = torch.tensor([[0.0], [1.0], [0.0], [1.0]])  # one 0/1 target per row, shape (4, 1), as in Keras


def model():
    """Dense(4) sigmoid, Dense(1) sigmoid, glorot-uniform weights and zero biases, the same in both programs."""
    return nn.Sequential(dense(2, 4), nn.Sigmoid(), dense(4, 1), nn.Sigmoid())
