"""Stack Overflow 58609115 (https://stackoverflow.com/questions/58609115), fixed: softmax + categorical_crossentropy.

The buggy program (buggy.py) learns one of 69 classes with sigmoid outputs and binary_crossentropy, for one
epoch. The benchmark's correct code, followed here, changes three things: ReLU hidden activations, a softmax
output with categorical_crossentropy (one choice among 69), and 10 epochs instead of 1.
Ground truth (DeepFD): loss.

Porting: as buggy.py (export78.csv, N(0, 0.05) weights, Adam defaults, batch size 50, the raw unscaled number
as input, the 20% test split as validation(), the runner's seed instead of none). Keras softmax +
categorical_crossentropy is logits with nn.CrossEntropyLoss on int64 class indices (no softmax module).
"""

from s58609115_data import CLASSES, X_TEST, Y_TEST, X, Y
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 10, 50
loss = nn.CrossEntropyLoss()  # Keras softmax + categorical_crossentropy


def model():
    return nn.Sequential(
        dense(1, 69, "normal"),
        nn.ReLU(),
        dense(69, 69, "normal"),
        nn.ReLU(),
        dense(69, CLASSES, "normal"),  # logits: the softmax is inside CrossEntropyLoss
    )


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
