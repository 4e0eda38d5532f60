"""gol_nn's data and network (https://github.com/alexander-travov/gol_nn, gol.py), shared by buggy.py and fixed.py.

Data as the original generates it: 3x3 Game of Life fields, each cell alive with probability 0.5, the next
state by the rules on a torus; inputs wrap-padded to 5x5. 8000 training and 2000 validation fields (numpy's
global generator, unseeded in the original: the runner's seed makes it).
The network: conv 3x3 (10 filters, 'valid') + ReLU, conv 1x1 (20) + ReLU, conv 1x1 (1), Keras Conv2D
initialization (glorot-uniform kernels, zero biases). Channels first, as PyTorch wants: (N, 1, 5, 5) in.
The output (N, 1, 3, 3) is flattened to (N, 9), one 0/1 target per cell, the multi-label format.
"""

import numpy as np
import torch
from torch import nn

HEIGHT = WIDTH = 3


def generate_field(shape, alive_prob=0.5):
    return (np.random.rand(*shape) < alive_prob).astype(np.int32)


def update_field(field, hw_axis=(1, 2)):
    h_ax, w_ax = hw_axis
    neighbours = np.zeros(field.shape, dtype=np.int32)
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            if dx or dy:
                neighbours += np.roll(np.roll(field, dx, w_ax), dy, h_ax)
    return np.logical_or(neighbours == 3, np.logical_and(field, neighbours == 2)).astype(np.int32)


def dataset(num_samples):
    """(inputs (N, 1, H+2, W+2) wrap-padded, targets (N, H*W)) as float32 tensors."""
    x = generate_field((num_samples, HEIGHT, WIDTH, 1))
    y = update_field(x)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="wrap")
    inputs = torch.from_numpy(padded.transpose(0, 3, 1, 2).astype(np.float32))  # NHWC -> NCHW
    return inputs, torch.from_numpy(y.reshape(num_samples, -1).astype(np.float32))


X, Y = dataset(8000)
X_VAL, Y_VAL = dataset(2000)


def keras_conv(n_in, n_out, k):
    conv = nn.Conv2d(n_in, n_out, k)  # 'valid' (and 1x1 'same') padding
    nn.init.xavier_uniform_(conv.weight)  # Keras Conv2D: glorot_uniform, fan = k*k*channels as in PyTorch
    nn.init.zeros_(conv.bias)
    return conv


def life_nn(*last):
    """The original's CNN; `last` is what follows the final 1x1 conv (nothing for logits, nn.Sigmoid())."""
    return nn.Sequential(
        keras_conv(1, 10, 3), nn.ReLU(), keras_conv(10, 20, 1), nn.ReLU(), keras_conv(20, 1, 1), *last, nn.Flatten()
    )
