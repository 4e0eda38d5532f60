"""Stack Overflow 33969059 (https://stackoverflow.com/questions/33969059), buggy: a softmax on a regression output.

A 3-3-2-1 tanh network with dropout regresses y = x . [2, 1, 0.5] + 2.2 (x uniform in [0, 10000)^3) with mean
squared error, but its output layer is a softmax over one unit, which is 1.0 for every input: the prediction
never moves and no gradient reaches any weight. Fix (fixed.py, the benchmark's correct code): a linear output.
Ground truth (DeepFD): act.

Porting: task = regression, float targets (B, 1) with a (B, 1) output. The softmax does not pair with mean
squared error, so nn.Softmax(dim=-1) stays as the model's last module and the loss is nn.MSELoss. init='uniform'
is Keras's U(-0.05, 0.05) with zero biases (kerasport.dense). SGD(lr=0.1, decay=1e-6, momentum=0.9,
nesterov=True), Keras's decay applied by kerasport.fit; batch_size not given: Keras's 32; 20 epochs.
shuffle='batch' (Keras shuffles the order of fixed 32-row blocks) is a plain shuffle here: the rows are
independent draws, so the two are the same in distribution. 4800 training rows instead of 100000 (3000 steps,
not 62500: the 10 s budget; see s33969059_data). validation() is the program's test set (model.evaluate). The
original has no fixed seed; the runner seeds every run.
"""

from s33969059_data import X_TEST, Y_TEST, X, Y, body
from torch import nn

from benchmarks.realbugs.kerasport import epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY = 20, 32, 1e-6
loss = nn.MSELoss()


def model():
    return nn.Sequential(*body(), nn.Softmax(dim=-1))  # the bug: a softmax over one unit is always 1.0


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.1, momentum=0.9, nesterov=True)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
