"""Stack Overflow 38648195 (https://stackoverflow.com/questions/38648195), fixed: sigmoid + binary cross-entropy.

The buggy program trains 3-label multi-hot targets through a softmax with mean_squared_error. This is the
benchmark's correct code: a sigmoid output and binary_crossentropy, the rest unchanged (same 20-20-3 body with
dropout 0.5, SGD lr 0.01, 20 epochs, batch 20). The audit (dlfaults/HowRealAreThey) notes that only half of
this fix is in the accepted answer; it is the standard multi-label output and it fixes the run.
Ground truth (DeepFD): act loss epoch.

Porting: task = multi-label, float 0/1 targets (B, 3). A sigmoid followed by binary_crossentropy is PyTorch's
logits + nn.BCEWithLogitsLoss, so there is no sigmoid module. Keras glorot-uniform weights and zero biases
(kerasport.dense). 4000 rows as in the post (s38648195_data), 3200 steps. validation() is the program's
validation_data, the 20% test split. The original has no fixed seed; the runner seeds every run.
"""

from s38648195_data import X_TEST, Y_TEST, X, Y, body
from torch import nn

from benchmarks.realbugs.kerasport import epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE = 20, 20
loss = nn.BCEWithLogitsLoss()  # the fix: sigmoid + binary_crossentropy, one independent yes/no per label


def model():
    return nn.Sequential(*body())  # logits: the sigmoid is inside the loss


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
