"""Stack Overflow 51930566 (https://stackoverflow.com/questions/51930566), buggy: sigmoid outputs for 3 classes.

A 4-4-3 network classifies iris with categorical_crossentropy, but its output layer is a sigmoid: three
independent squashings, not a distribution over the species. Keras's categorical_crossentropy then rescales the
three sigmoids to sum to 1 before the log, so the network is trained on an odd, saturating surrogate of the
class probabilities. The program also splits the data twice, the second time on the unscaled features, so it
trains on raw centimetres (the corrected program keeps the standardized split).
Fix (fixed.py, the benchmark's correct code, an answer to the post): softmax output on the standardized split.
Ground truth (DeepFD): act. The audit (HowRealAreThey) notes the post is a how-to; the fix follows its answer.

Porting: task = multi-class, 3 classes. A sigmoid does not pair with categorical_crossentropy, so nn.Sigmoid stays
as the model's last module, the loss is Keras's categorical_crossentropy on its outputs (kerasport), and the
targets are float one-hot rows (B, 3), as Keras had them. `init='normal'` is Keras's N(0, 0.05) with zero biases
(kerasport.dense). Adam at Keras's defaults; batch 5, 50 epochs on 75 rows (750 steps), as the original.
validation_data=(X_test, Y_test) is validation(). The original has no fixed seed; the runner seeds every run.
"""

from s51930566_data import N_CLASSES, N_FEATURES, X_RAW, one_hot, split
from torch import nn

from benchmarks.realbugs.kerasport import adam, categorical_crossentropy, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 50, 5
X_train, X_test, y_train, y_test = split(X_RAW)  # the bug's second split: unscaled features
Y_train, Y_test = one_hot(y_train), one_hot(y_test)
loss = categorical_crossentropy


def model():
    return nn.Sequential(
        dense(N_FEATURES, 4, "normal"),
        nn.ReLU(),
        dense(4, N_CLASSES, "normal"),
        nn.Sigmoid(),  # the bug: sigmoids, not a softmax, under categorical_crossentropy
    )


def batches():
    return epoch_batches(X_train, Y_train, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_test, Y_test)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_train, Y_train, EPOCHS, BATCH_SIZE)
