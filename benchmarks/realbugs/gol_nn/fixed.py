"""gol_nn (https://github.com/alexander-travov/gol_nn), fixed: mean squared error and Adam at lr 0.01.

The buggy program (buggy.py) learns the next Game of Life state per cell with binary_crossentropy and Adam's
default lr 0.001 and stalls at ~80% of the cells right. The fix followed is the benchmark's correct code, which
is the author's own two commits (d9b30a0 "Change default loss to MSE", 49bea76 "Increase default learning rate"):
mean squared error on the sigmoid outputs and Adam at lr 0.01; still 2 epochs (see buggy.py on the epoch label).
Ground truth (DeepFD): loss epoch lr.

Porting: as buggy.py (sgol_nn_data, (B, 9) float 0/1 targets, batch size 64, 2 epochs, validation_data as
validation(), the runner's seed). The sigmoid does not pair with mse, so it stays as the model's last module
(before the flatten) and the loss is nn.MSELoss (Keras 'mse': the mean over cells and examples).
"""

from sgol_nn_data import X_VAL, Y_VAL, X, Y, life_nn
from torch import nn

from benchmarks.realbugs.kerasport import adam, epoch_batches, fit

EPOCHS, BATCH_SIZE = 2, 64
loss = nn.MSELoss()  # Keras 'mse' on the sigmoid's output


def model():
    return life_nn(nn.Sigmoid())  # the sigmoid stays: mse does not pair with it


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params, lr=0.01)


def validation():
    return [(X_VAL, Y_VAL)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
