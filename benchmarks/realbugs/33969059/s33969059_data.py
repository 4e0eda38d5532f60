"""The data of Stack Overflow 33969059: y = x . ws + xno on random x in [0, 10000)^3, made as the program makes it.

get_data is the program's own generator (numpy's global state, seeded by the runner): inputs uniform in
[0, bounds) per column, targets their dot product with WS plus XNO, plus for the test rows a shift of
rweight * myrand(-mn, mn) (the program's formula, in [-1.5, -0.5] * rweight for mn = 1). WS = [2, 1, 0.5] and
XNO = 2.2, the values both programs hard-code (the correct code divides them by their largest, 2.2, which only
rescales the targets; the recipes keep one data set so that the output layer is the only difference).

Rows: the program trains on 100000 rows at Keras's default batch of 32 for 20 epochs, 62500 steps, far beyond
the 10 s budget; here 4800 training rows (150 steps per epoch, 3000 steps) and the program's 10000 test rows.
"""

import numpy as np
import torch
from torch import nn

from benchmarks.realbugs.kerasport import dense

N_TRAIN, N_TEST = 4800, 10000  # the program: 100000 and 10000
WS, XNO, MN, BOUNDS = [2.0, 1.0, 0.5], 2.2, 1, 10000


def myrand(a, b):
    return (b) * (np.random.random_sample() - 0.5) + a


def get_data(count, ws, xno, bounds=100, rweight=0.0):
    xt = np.multiply(bounds, np.random.rand(count, len(ws)))
    np.random.rand(count, 1)  # the program draws (and overwrites) a yt here: kept so the draws match
    xno = np.array([float(xno) + rweight * myrand(-MN, MN) for _ in xt], dtype=float)
    return xt, np.add(np.dot(xt, np.array(ws, dtype=float)), xno)


_x_test, _y_test = get_data(N_TEST, WS, XNO, BOUNDS, rweight=0.4)  # the program makes the test rows first
_x, _y = get_data(N_TRAIN, WS, XNO, BOUNDS)
X, X_TEST = torch.tensor(_x, dtype=torch.float32), torch.tensor(_x_test, dtype=torch.float32)
Y = torch.tensor(_y, dtype=torch.float32).unsqueeze(1)  # (B, 1): Keras reshapes its (B,) targets to the output
Y_TEST = torch.tensor(_y_test, dtype=torch.float32).unsqueeze(1)


def body() -> list:
    """Dense(3) tanh, Dropout(0.5), Dense(2) tanh, Dropout(0.5), Dense(1), all init='uniform' (U(-0.05, 0.05))."""
    return [
        dense(3, 3, "uniform"),
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(3, 2, "uniform"),
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(2, 1, "uniform"),
    ]
