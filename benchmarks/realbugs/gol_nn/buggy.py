"""gol_nn (https://github.com/alexander-travov/gol_nn), buggy: Game of Life with binary_crossentropy and Adam's lr.

A small CNN learns the next state of each cell of a 3x3 Game of Life field (a 0/1 target per cell) with
binary_crossentropy and Keras Adam's default lr 0.001, for 2 epochs of 125 batches: the loss stalls around 0.4
and the cells are right only ~80% of the time, the author's "model does not reach the best accuracy".
Fix (fixed.py): the benchmark's correct code, i.e. the author's own commits d9b30a0 "Change default loss to MSE"
and 49bea76 "Increase default learning rate" (Adam lr 0.01). Ground truth (DeepFD): loss epoch lr. The epoch
label has no counterpart in the programs: DeepLocalize's buggy and correct code both train 2 epochs (the
repository's final state; DeepFD's sheet mentions 5 -> 10), so both recipes keep 2.

Porting: data and network in sgol_nn_data (generated as gol.py does; 8000 training fields, the 2000 validation
fields of validation_data as validation()). Output and targets flattened to (B, 9): float 0/1 per cell, the
multi-label format. The original's sigmoid + binary_crossentropy is logits + nn.BCEWithLogitsLoss. Batch size 64,
2 epochs (250 steps), as the original. The original has no fixed seed; the runner seeds every run.
"""

from sgol_nn_data import X_VAL, Y_VAL, X, Y, life_nn
from torch import nn

from benchmarks.realbugs.kerasport import adam, epoch_batches, fit

EPOCHS, BATCH_SIZE = 2, 64
loss = nn.BCEWithLogitsLoss()  # Keras sigmoid + binary_crossentropy


def model():
    return life_nn()  # logits: the sigmoid is inside BCEWithLogitsLoss


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return adam(params)  # Keras 'adam': lr 0.001


def validation():
    return [(X_VAL, Y_VAL)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE)
