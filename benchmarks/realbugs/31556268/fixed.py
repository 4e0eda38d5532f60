"""Stack Overflow 31556268 (https://stackoverflow.com/questions/31556268), fixed: XOR with MSE and Adam.

The buggy program trains a 2-4-1 sigmoid network on XOR with mean_absolute_error and SGD(lr=0.05,
momentum=0.11, nesterov, decay=1e-6) for 1000 epochs, and predicts nearly the same value for every row. The
accepted answer and the benchmark's correct code agree: loss 'mse', optimizer 'adam' (Keras defaults: lr 0.001), 10000
epochs, batch 4 (10000 steps). The network is unchanged. Ground truth (DeepFD): loss epoch lr opt.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output. A sigmoid before
mean squared error is not a logits loss, so nn.Sigmoid stays as the last module and the loss is nn.MSELoss.
Keras glorot-uniform weights and zero biases (kerasport.dense); Keras's Adam (epsilon 1e-7, kerasport.adam).
No validation(): the original predicts two of its training rows. The original has no fixed seed; the runner
seeds every run.
"""

from s31556268_data import X, Y, model
from torch import nn

from benchmarks.realbugs.kerasport import adam, epoch_batches, fit

EPOCHS, BATCH_SIZE = 10000, 4
loss = nn.MSELoss()  # the fix: mean squared error, Adam, ten times the epochs


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
