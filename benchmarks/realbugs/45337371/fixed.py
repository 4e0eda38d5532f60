"""Stack Overflow 45337371 (https://stackoverflow.com/questions/45337371), fixed: a sigmoid output unit.

The buggy network (5-60-50-1, ReLUs) ends in a softmax over one unit, which is 1.0 for every input, so its output
and all its gradients are constant. This is the benchmark's correct code: the last Dense has
activation='sigmoid'; everything else (binary_crossentropy, Adam, batch 1, 5 epochs) is unchanged.
Ground truth (DeepFD): act.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output. Keras's sigmoid +
binary_crossentropy is BCEWithLogitsLoss on the last Dense's output, so the model ends at that Dense (a logit)
and has no nn.Sigmoid module. Dense layers are Keras's (glorot-uniform, zero biases: kerasport.dense); Adam at
Keras's defaults. x is np.random.uniform as in DeepLocalize's updatepy.py; its independent-noise targets are
replaced by a learnable 0/1 rule (see s45337371_data.py). No validation(): the original evaluates nothing held
out. The original has no fixed seed; the runner seeds every run.
"""

from s45337371_data import NUM_FEATURES, X, Y
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 5, 1
loss = nn.BCEWithLogitsLoss()  # Keras's sigmoid + binary_crossentropy


def model():
    return nn.Sequential(
        dense(NUM_FEATURES, 60),
        nn.ReLU(),
        dense(60, 50),
        nn.ReLU(),
        dense(50, 1),  # the fix: a sigmoid output, folded into the loss
    )


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
