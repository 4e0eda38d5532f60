"""Stack Overflow 38648195 (https://stackoverflow.com/questions/38648195), buggy: multi-label with softmax + MSE.

"Keras low accuracy classification task": each row of make_multilabel_classification carries 0 to 3 of 3
labels, but the 20-20-3 network ends in a softmax (its outputs sum to 1, so two or three labels can never all
be near 1, and a row without labels never near 0) and is trained with mean_squared_error. Fix (fixed.py, the
benchmark's correct code): a sigmoid output and binary_crossentropy; the audit (dlfaults/HowRealAreThey) notes
that only half of this fix is in the accepted answer, but it is the standard multi-label output and it fixes the
run. Ground truth (DeepFD): act loss epoch.

Porting: task = multi-label, float 0/1 targets (B, 3). The softmax does not pair with mean squared error, so
nn.Softmax(dim=-1) stays as the model's last module and the loss is Keras's mean_squared_error (kerasport). Keras
glorot-uniform weights and zero biases (kerasport.dense); optimizer 'sgd' is Keras's SGD at lr 0.01. 20 epochs
of batches of 20 on 3200 rows (4000 as in the post, not the benchmark's 60000: see s38648195_data), 3200 steps.
validation() is the program's validation_data, the 20% test split. The original has no fixed seed; the runner
seeds every run.
"""

from s38648195_data import X_TEST, Y_TEST, X, Y, body
from torch import nn

from benchmarks.realbugs.kerasport import epoch_batches, fit, mean_squared_error, sgd

EPOCHS, BATCH_SIZE = 20, 20
loss = mean_squared_error


def model():
    return nn.Sequential(*body(), nn.Softmax(dim=-1))  # the bug: labels that compete, for rows with several


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
