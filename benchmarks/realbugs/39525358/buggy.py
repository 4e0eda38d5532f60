"""Stack Overflow 39525358 (https://stackoverflow.com/questions/39525358), buggy: raw inputs near 65..70.

A 3-12-3-1 ReLU network with a sigmoid output classifies rows of three numbers between 65 and 70. They are fed
unscaled (the StandardScaler lines are commented out), so with Keras's small `init='uniform'` start the ReLU
units see large, nearly collinear inputs and the model stays near the majority-class answer: low accuracy.
Fix (fixed.py, the benchmark's correct code): standardize the inputs (StandardScaler), batch size 10, and
report the held-out 33% as validation data.
Ground truth (DeepFD): act lr missing_prep.

Porting: task = binary with one output unit: float 0/1 targets (B, 1) and a (B, 1) output. Keras's sigmoid +
binary_crossentropy is a logits output + nn.BCEWithLogitsLoss (no sigmoid module). `init='uniform'` is
U(-0.05, 0.05) with zero biases (kerasport.dense); Adam has Keras's defaults (lr 0.001, epsilon 1e-7).
150 epochs at batch size 1 on the 13 training rows: 1950 steps. The buggy program evaluates nothing on the
test rows, so there is no validation(). The original's np.random.seed(7) is replaced by the runner's seeds.
"""

from s39525358_data import X, split
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

X_TRAIN, Y_TRAIN, X_TEST, Y_TEST = split(X)  # the bug: X is not scaled
EPOCHS, BATCH_SIZE = 150, 1
loss = nn.BCEWithLogitsLoss()  # Keras: sigmoid output + binary_crossentropy


def model():
    return nn.Sequential(dense(3, 12, "uniform"), nn.ReLU(), dense(12, 3, "uniform"), nn.ReLU(), dense(3, 1, "uniform"))


def batches():
    return epoch_batches(X_TRAIN, Y_TRAIN, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, Y_TRAIN, EPOCHS, BATCH_SIZE)
