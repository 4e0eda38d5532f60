"""Stack Overflow 45442843 (https://stackoverflow.com/questions/45442843), buggy: a softmax over one output unit.

A 1-1-1 network classes numbers between 15000 and 25000 into two groups: Dense(1) -> sigmoid -> Dense(1,
init='normal') -> softmax, trained with mean_absolute_error and RMSprop for 100 epochs in batches of 200. The
softmax over one unit is 1.0 for every input, so the prediction is constant, the loss stays at the fraction of
0-targets and every gradient is zero; the unscaled inputs would saturate the first sigmoid anyway.
Fix (fixed.py, the benchmark's correct code): inputs standardized, a sigmoid output, binary_crossentropy; and
1000 epochs instead of 100, since the correct code's 400 steps leave it barely trained (see fixed.py).
Ground truth (DeepFD): loss opt act epoch (DeepFD's own patch: mse and Adam; the post's answer: normalize the
inputs or change the activation; the audit notes the benchmark's fix does both and changes the loss).

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output, as in Keras.
The softmax over one unit does not pair with mean_absolute_error, so it stays as the model's last module
(nn.Softmax(dim=-1)) and the loss is Keras's mean_absolute_error. Dense(1, input_dim=1) is glorot-uniform,
`init='normal'` N(0, 0.05), biases zero (kerasport.dense). RMSprop at Keras's defaults (lr 0.001, rho 0.9,
epsilon 1e-7). 799 training rows in batches of 200 for 100 epochs: 400 steps. validation_data=(Xtest, Ytest) is
validation(). The original's numpy.random.seed(7) is replaced by the runner's seeds.
"""

from s45442843_data import X_RAW, split
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, mean_absolute_error, rmsprop

EPOCHS, BATCH_SIZE = 100, 200
X_train, X_test, Y_train, Y_test = split(X_RAW)  # the raw numbers, 15000 to 25000
loss = mean_absolute_error


def model():
    return nn.Sequential(
        dense(1, 1),
        nn.Sigmoid(),
        dense(1, 1, "normal"),
        nn.Softmax(dim=-1),  # the bug: a softmax over one unit is always 1.0
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
