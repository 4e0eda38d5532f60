"""Stack Overflow 34311586 (https://stackoverflow.com/questions/34311586), buggy: XOR with a softmax on one unit.

A 2-2-3-1 sigmoid network learns XOR with mean squared error, but its output layer is a softmax over a single
unit, which is 1 whatever the input: the output never moves, so the loss stays at 4/6 and the gradients are zero.
SGD at lr 0.001 for 20 epochs in one batch (Keras's default 32 > 6 rows) would be far too little even without it.
Fix (fixed.py, the benchmark's correct code): a sigmoid output, lr 0.1, 10000 epochs, batch size 4.
Ground truth (DeepFD): lr act init epoch batch_size.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output, as in Keras.
`init='uniform'` is Keras's U(-0.05, 0.05) with zero biases (kerasport.dense). The softmax over one unit does
not pair with mean_squared_error, so it stays as the model's last module (nn.Softmax(dim=-1)) and the loss is
Keras's mean_squared_error. SGD(lr=0.001, decay=1e-6, momentum=0.9, nesterov=True): the decay is Keras's
lr / (1 + decay * iterations), applied by kerasport.fit. The original's evaluation is on the training rows, so
there is no validation(). The original has no fixed seed; the runner seeds every run.
"""

from s34311586_data import X, Y
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, mean_squared_error, sgd

EPOCHS, BATCH_SIZE, DECAY = 20, 32, 1e-6  # batch_size not given: Keras's 32, so one batch of all 6 rows
loss = mean_squared_error


def model():
    return nn.Sequential(
        dense(2, 2, "uniform"),
        nn.Sigmoid(),
        dense(2, 3, "uniform"),
        nn.Sigmoid(),
        dense(3, 1, "uniform"),
        nn.Softmax(dim=-1),  # the bug: a softmax over one unit is always 1.0
    )


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.001, momentum=0.9, nesterov=True)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
