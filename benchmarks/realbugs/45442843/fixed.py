"""Stack Overflow 45442843 (https://stackoverflow.com/questions/45442843), fixed: scaled inputs, sigmoid, 1000 epochs.

The buggy 1-1-1 network ends in a softmax over one unit (always 1.0) under mean_absolute_error, on raw numbers
from 15000 to 25000. This follows the benchmark's correct code: the column is standardized
(sklearn.preprocessing.scale), the last Dense(1, init='normal') has activation='sigmoid' and the loss is
binary_crossentropy (the post's answer: normalize or change the activation; the benchmark also changes the loss).
It departs from it in one place: the correct code keeps 100 epochs (400 steps), after which this run has barely
begun (loss 0.69 -> 0.67, validation accuracy 0.69 to 0.92 over seeds: RMSprop's 0.001 steps move the
N(0, 0.05) output weight little in 400 steps). Ground truth lists `epoch`, so fixed.py trains 1000 epochs (4000
steps; loss about 0.2, validation accuracy 0.98 on every seed tried). RMSprop and batches of 200 are unchanged.
Ground truth (DeepFD): loss opt act epoch.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output. Keras's sigmoid +
binary_crossentropy is BCEWithLogitsLoss on the last Dense's output, so the model ends at that Dense (a logit) and
has no final nn.Sigmoid (the hidden sigmoid stays). Dense(1, input_dim=1) is glorot-uniform, `init='normal'`
N(0, 0.05), biases zero (kerasport.dense). RMSprop at Keras's defaults. 400 steps. validation() is the program's
validation_data. The original's numpy.random.seed(7) is replaced by the runner's seeds.
"""

from s45442843_data import X_SCALED, split
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, rmsprop

EPOCHS, BATCH_SIZE = 1000, 200  # the correct code's 100 epochs are too few (see above)
X_train, X_test, Y_train, Y_test = split(X_SCALED)  # the fix: standardized inputs
loss = nn.BCEWithLogitsLoss()  # Keras's sigmoid + binary_crossentropy


def model():
    return nn.Sequential(
        dense(1, 1),
        nn.Sigmoid(),
        dense(1, 1, "normal"),  # the fix: a sigmoid output, folded into the loss
    )


def batches():
    return epoch_batches(X_train, Y_train, BATCH_SIZE)


def optimizer(params):
    return rmsprop(params)


def validation():
    return [(X_test, Y_test)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_train, Y_train, EPOCHS, BATCH_SIZE)
