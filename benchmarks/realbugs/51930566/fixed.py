"""Stack Overflow 51930566 (https://stackoverflow.com/questions/51930566), fixed: softmax over the 3 species.

The buggy 4-4-3 iris network ends in sigmoids under categorical_crossentropy and trains on the unscaled split.
This is the benchmark's correct code (the fix an answer to the post suggests): the last Dense has
activation='softmax' and the program trains on the standardized split; init, Adam, batch 5 and 50 epochs are
unchanged. Ground truth (DeepFD): act.

Porting: task = multi-class, 3 classes. Keras's softmax + categorical_crossentropy is CrossEntropyLoss on the
last Dense's output, so the model ends at that Dense (logits, no softmax module) and the targets are int64 class
indices (B,). `init='normal'` is N(0, 0.05) with zero biases (kerasport.dense); Adam at Keras's defaults.
validation_data=(X_test, Y_test) is validation(). The original has no fixed seed; the runner seeds every run.
"""

from s51930566_data import N_CLASSES, N_FEATURES, X_SCALED, split
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 50, 5
X_train, X_test, y_train, y_test = split(X_SCALED)  # the fix: the standardized split
loss = nn.CrossEntropyLoss()  # Keras's softmax + categorical_crossentropy


def model():
    return nn.Sequential(
        dense(N_FEATURES, 4, "normal"),
        nn.ReLU(),
        dense(4, N_CLASSES, "normal"),  # the fix: softmax, folded into the loss
    )


def batches():
    return epoch_batches(X_train, y_train, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_test, y_test)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_train, y_train, EPOCHS, BATCH_SIZE)
