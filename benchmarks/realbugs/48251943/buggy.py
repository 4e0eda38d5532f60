"""Stack Overflow 48251943 (https://stackoverflow.com/questions/48251943), buggy: a ReLU on a regression output.

"My keras model does not predict negative values": a 2-4-1 network regresses column 1 of Book1.csv on columns 2
and 3 with mean squared error, but its output layer is a ReLU, which cannot be below 0 (and, once its input is
negative for every row, passes no gradient at all). Fix (fixed.py): the output's activation; see fixed.py for
why it is a linear output rather than the benchmark's tanh. Ground truth (DeepFD): act.

Porting: task = regression, float targets (17, 1) with a (17, 1) output. The ReLU does not pair with the loss,
so nn.ReLU stays as the model's last module and the loss is nn.MSELoss. Keras glorot-uniform weights and zero
biases (kerasport.dense); optimizer 'sgd' is Keras's SGD at lr 0.01. 50 epochs of batches of 10 (a batch of 10
and one of 7 per epoch, reshuffled: 100 steps). No validation(): the original predicts its training rows. The
original's numpy.random.seed(7) is replaced by the runner's seeds.
"""

from s48251943_data import X, Y
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE = 50, 10
loss = nn.MSELoss()


def model():
    return nn.Sequential(dense(2, 4), nn.ReLU(), dense(4, 1), nn.ReLU())  # the bug: a ReLU output is never < 0


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
