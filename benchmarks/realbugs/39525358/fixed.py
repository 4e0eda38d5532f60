"""Stack Overflow 39525358 (https://stackoverflow.com/questions/39525358), fixed: standardized inputs.

The buggy program feeds three unscaled numbers near 65..70 to a 3-12-3-1 ReLU network with Keras's small
`init='uniform'` start and does not learn the classes. This is the benchmark's correct code: the inputs are
standardized (StandardScaler, fitted on all 20 rows before the split, as in the program), the batch size is 10
and the held-out 33% is passed as validation_data. Everything else (layers, init, Adam, 150 epochs) is kept.
Ground truth (DeepFD): act lr missing_prep. DeepFD's own patch also scales the inputs (and raises Adam's rate);
the dlfaults/HowRealAreThey audit found this fix matches the accepted answer (missing normalization).
Measured in this port: 7 seeds in 10 reach 100% on train and validation; in the other 3 the tiny uniform start
(3 ReLU units, Adam at 1e-3, only 300 steps) has not left the majority answer yet. The recipe keeps the correct
code's rate and epochs all the same (DeepFD's patch would also raise Adam's rate to 0.1).

Porting: task = binary with one output unit: float 0/1 targets (B, 1) and a (B, 1) output. Keras's sigmoid +
binary_crossentropy is a logits output + nn.BCEWithLogitsLoss. `init='uniform'` is U(-0.05, 0.05) with zero
biases (kerasport.dense); Adam has Keras's defaults. 150 epochs at batch size 10 on 13 rows: 300 steps.
validation() is the 7 test rows (validation_data=(X_test, y_test)). The original's np.random.seed(7) is
replaced by the runner's seeds.
"""

from s39525358_data import X, split
from sklearn.preprocessing import StandardScaler
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

X_TRAIN, Y_TRAIN, X_TEST, Y_TEST = split(StandardScaler().fit_transform(X))  # the fix: standardized inputs
EPOCHS, BATCH_SIZE = 150, 10
loss = nn.BCEWithLogitsLoss()  # Keras: sigmoid output + binary_crossentropy


def model():
    return nn.Sequential(dense(3, 12, "uniform"), nn.ReLU(), dense(12, 3, "uniform"), nn.ReLU(), dense(3, 1, "uniform"))


def batches():
    return epoch_batches(X_TRAIN, Y_TRAIN, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, Y_TRAIN, EPOCHS, BATCH_SIZE)
