"""Stack Overflow 58609115 (https://stackoverflow.com/questions/58609115), buggy: 69 classes with binary_crossentropy.

A 1-69-69-69 network with sigmoid activations and a sigmoid output learns which of 69 classes (a number's length
and leading digit) a number belongs to, with binary_crossentropy: 69 independent yes/no outputs instead of one
choice among 69. The loss falls quickly to the easy optimum "every output says no" (1/69 positives) while the
accuracy stays near chance; one epoch (36 Adam steps) is all it gets.
Fix (fixed.py, the benchmark's correct code): ReLU hidden layers, a softmax output with categorical_crossentropy,
10 epochs. Ground truth (DeepFD): loss.

Porting: data from the shipped export78.csv (s58609115_data). The original's sigmoid + binary_crossentropy on
one-hot labels is a multi-label loss: logits with nn.BCEWithLogitsLoss and float one-hot targets (B, 69), as
Keras had them. kernel_initializer='random_normal' is Keras's N(0, 0.05) with zero biases (dense(..., "normal")).
Adam with Keras's defaults, batch size 50, 1 epoch. The input (the raw number, up to 1e9) is not scaled, as in
the original. The original splits off 20% as a test set; the corrected program evaluates on it, so both recipes
have it as validation(). The original has no fixed seed; the runner seeds every run (and so the split).
"""

from s58609115_data import CLASSES, X_TEST, Y_ONEHOT, Y_TEST_ONEHOT, X
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 1, 50
loss = nn.BCEWithLogitsLoss()  # the bug: Keras binary_crossentropy after a sigmoid, on one-hot class labels


def model():
    return nn.Sequential(
        dense(1, 69, "normal"),
        nn.Sigmoid(),
        dense(69, 69, "normal"),
        nn.Sigmoid(),
        dense(69, CLASSES, "normal"),  # logits: the sigmoid is inside BCEWithLogitsLoss
    )


def batches():
    return epoch_batches(X, Y_ONEHOT, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_TEST, Y_TEST_ONEHOT)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y_ONEHOT, EPOCHS, BATCH_SIZE)
