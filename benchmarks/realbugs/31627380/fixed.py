"""Stack Overflow 31627380 (https://stackoverflow.com/questions/31627380), fixed: sigmoid + BCE on scaled inputs.

The buggy Titanic network (10-512-2, softmax, categorical_crossentropy, Adam) trains on unscaled label codes and
amounts. The benchmark's correct code changes the output to sigmoid and the loss to binary_crossentropy (ground
truth, DeepFD: opt act loss); fixed.py makes that change, and also standardizes the ten input columns
(sklearn.preprocessing.scale over the 891 training rows), because the benchmark's change alone does not fix the
run: on this port it ends at validation accuracy 0.68 to 0.75 (majority class 0.64), as the buggy run does, and
DeepFD's patch (SGD) predicts the majority class; with the inputs standardized it reaches 0.85 to 0.87. The
post's flat loss comes from the unscaled inputs saturating the output. Everything else (512 ReLUs, Dropout 0.5,
Adam, batch 4, 10 epochs, validation_split 0.2) is unchanged.

Porting: two sigmoid units under binary_crossentropy are BCEWithLogitsLoss on the last Dense's output (no sigmoid
module), with the program's to_categorical targets as float 0/1 rows (B, 2): a multi-label target over the two
columns, as in Keras. Dense layers are Keras's (glorot-uniform, zero biases); Adam at Keras's defaults; 1780
steps. validation() is the last 179 rows (Keras's validation_split). The original's np.random.seed(1919) is
replaced by the runner's seeds.
"""

from s31627380_data import N_FEATURES, SCALED_TRAIN, SCALED_VAL, Y_train, Y_val
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 10, 4
loss = nn.BCEWithLogitsLoss()  # Keras's sigmoid + binary_crossentropy, on the two one-hot columns


def model():
    return nn.Sequential(
        dense(N_FEATURES, 512),
        nn.ReLU(),
        nn.Dropout(0.5),
        dense(512, 2),  # sigmoid, folded into the loss
    )


def batches():
    return epoch_batches(SCALED_TRAIN, Y_train, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(SCALED_VAL, Y_val)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, SCALED_TRAIN, Y_train, EPOCHS, BATCH_SIZE)
