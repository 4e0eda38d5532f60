"""Stack Overflow 47724077 (https://stackoverflow.com/questions/47724077), buggy: UCI Adult fed unscaled.

A 14-21-2 ReLU/softmax network classifies income (<=50K/>50K) from the Adult attributes, trained with Adam at
Keras's default rate for 50 epochs of batch 100. The inputs are not scaled (fnlwgt ~190000, capital-gain up to
99999, next to label codes 0..40), so the logits start in the thousands, the loss is in the hundreds for the
whole run and the model ends near the majority class (76% <=50K).
Fix (fixed.py): standardize the inputs (DeepFD's patch); see fixed.py for why not only the benchmark's change.
Ground truth (DeepFD): opt lr missing_prep epoch.

The post itself is about a crash ("could not broadcast input array from shape (14,1) into shape (14)"): the
program writes one-hot arrays into single DataFrame columns. That spelling bug is not ported (it does not run);
the data module reads the columns as the 14-input model means them, label-encoded (see s47724077_data.py).

Porting: task = binary classification with two softmax outputs: Keras's softmax + categorical_crossentropy on
one-hot labels is logits (B, 2) + nn.CrossEntropyLoss on int64 class indices (B,). Dense layers are Keras's
(kerasport.dense: glorot-uniform, zero biases); Adam has Keras's defaults (lr 0.001, epsilon 1e-7).
Data: the first 8000 of 32561 rows (for time, see s47724077_data.py): 50 epochs x 80 batches = 4000 steps.
The original evaluates on its training rows, so there is no validation(). It has no fixed seed; the runner
seeds every run.
"""

import torch
from s47724077_data import X, Y
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

X_TRAIN = torch.tensor(X)  # the bug: raw attributes, no scaling
EPOCHS, BATCH_SIZE = 50, 100
loss = nn.CrossEntropyLoss()  # Keras: softmax output + categorical_crossentropy


def model():
    return nn.Sequential(dense(14, 21), nn.ReLU(), dense(21, 2))


def batches():
    return epoch_batches(X_TRAIN, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, Y, EPOCHS, BATCH_SIZE)
