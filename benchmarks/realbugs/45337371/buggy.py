"""Stack Overflow 45337371 (https://stackoverflow.com/questions/45337371), buggy: a softmax over one output unit.

The post asks why the gradient of its model's output with respect to the input is all zeros. The network is
5-60-50-1 with ReLUs and ends in Dense(1, activation='softmax'): a softmax over a single unit is exp(z)/exp(z) = 1
whatever z, so the output is constant and every gradient through it is zero. Trained (DeepLocalize's run:
binary_crossentropy, Adam, batch 1, 5 epochs) the loss never moves and nothing is learnt.
Fix (fixed.py, the benchmark's correct code): Dense(1, activation='sigmoid').
Ground truth (DeepFD): act.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output, as in Keras.
Dense layers are Keras's (glorot-uniform weights, zero biases: kerasport.dense). The softmax over one unit does
not pair with binary_crossentropy, so it stays as the model's last module (nn.Softmax(dim=-1)) and the loss is
Keras's binary_crossentropy on probabilities (clipped to [1e-7, 1 - 1e-7], so the loss is about 16.1 on every
0-target and 0 on every 1-target). Adam at Keras's defaults (lr 0.001, epsilon 1e-7). The training run is
DeepLocalize's updatepy.py (batch_size 1, 5 epochs: 5000 steps); its x is np.random.uniform as there, but its
targets were independent uniform noise, replaced by a learnable 0/1 rule (see s45337371_data.py). The original
evaluates nothing held out, so there is no validation(). The original has no fixed seed; the runner seeds every
run.
"""

from s45337371_data import NUM_FEATURES, X, Y
from torch import nn

from benchmarks.realbugs.kerasport import adam, binary_crossentropy, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 5, 1
loss = binary_crossentropy


def model():
    return nn.Sequential(
        dense(NUM_FEATURES, 60),
        nn.ReLU(),
        dense(60, 50),
        nn.ReLU(),
        dense(50, 1),
        nn.Softmax(dim=-1),  # the bug: a softmax over one unit is always 1.0
    )


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
