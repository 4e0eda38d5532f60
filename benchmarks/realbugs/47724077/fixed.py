"""Stack Overflow 47724077 (https://stackoverflow.com/questions/47724077), fixed: UCI Adult, standardized inputs.

The buggy program trains a 14-21-2 network with Adam on the raw Adult attributes (fnlwgt ~190000, capital-gain
up to 99999) and ends near the majority class. Ground truth (DeepFD): opt lr missing_prep epoch.

Which fix: the benchmark's correct code changes only the optimizer (Adam -> Keras's default SGD, lr 0.01). Ported
faithfully, that does not fix the run: on the raw inputs SGD collapses to the majority class (accuracy 0.761 =
the share of <=50K, on 2 seeds). The dlfaults/HowRealAreThey audit also found the benchmark's buggy and fixed
programs equivalent for this post. DeepFD's patch adds `X = StandardScaler().fit_transform(X)` (its ground
truth names missing_prep) to the SGD change; that is what this recipe does, and it trains to ~0.84 accuracy.

Porting: task = binary classification with two softmax outputs: logits (B, 2) + nn.CrossEntropyLoss on int64
class indices (B,) (Keras's softmax + categorical_crossentropy on one-hot labels). Dense layers are Keras's
(kerasport.dense); SGD is Keras's default (lr 0.01, no momentum). Data: the first 8000 of 32561 rows (for time,
see s47724077_data.py): 50 epochs x 80 batches = 4000 steps. The original evaluates on its training rows, so
there is no validation(). It has no fixed seed; the runner seeds every run.
"""

import torch
from s47724077_data import X, Y
from sklearn.preprocessing import StandardScaler
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

X_TRAIN = torch.tensor(StandardScaler().fit_transform(X), dtype=torch.float32)  # the fix (DeepFD's patch)
EPOCHS, BATCH_SIZE = 50, 100
loss = nn.CrossEntropyLoss()  # Keras: softmax output + categorical_crossentropy


def model():
    return nn.Sequential(dense(14, 21), nn.ReLU(), dense(21, 2))


def batches():
    return epoch_batches(X_TRAIN, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params)  # the benchmark's change: optimizer="sgd" (Keras's default lr 0.01)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, Y, EPOCHS, BATCH_SIZE)
