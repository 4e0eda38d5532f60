"""Stack Overflow 59278771 (https://stackoverflow.com/questions/59278771), buggy: iris with a sigmoid output.

A 4-4-3 network (ReLU hidden layer, Keras `kernel_initializer="normal"`) classifies the iris species from the raw
measurements with categorical_crossentropy, but its output layer is a sigmoid, not a softmax: Keras's
categorical_crossentropy renormalizes the three sigmoids to sum to 1, so the loss sees only their ratios and the
outputs are no class probabilities; the inputs are not scaled either.
Measured in this port: the run is NOT visibly broken. On 10 seeds it reaches 0.95-0.98 training accuracy (the
fixed recipe: ~0.97); the fault is in the model's design (the output and the missing scaling), not in a loss
that fails to fall. DeepFD's note on its patch says only that SGD "will slightly improve the accuracy".
Fix (fixed.py, DeepFD's patch): standardized inputs, a softmax output, selu, SGD.
Ground truth (DeepFD): act opt missing_prep.

Porting: task = 3-class classification where the loss is not a cross-entropy on a softmax: the model keeps
nn.Sigmoid as its last module, the loss is Keras's categorical_crossentropy on probabilities
(kerasport.categorical_crossentropy) and the targets are float one-hot (B, 3), as Keras had them.
`kernel_initializer="normal"` is N(0, 0.05) with zero biases (kerasport.dense); Adam has Keras's defaults.
200 epochs of batch 5 on all 150 rows: 6000 steps. No validation(): the buggy program evaluates nothing.
The original's numpy.random.seed(7) is replaced by the runner's seeds.
"""

import torch
from s59278771_data import ONE_HOT, X
from torch import nn

from benchmarks.realbugs.kerasport import adam, categorical_crossentropy, dense, epoch_batches, fit

X_TRAIN = torch.tensor(X)  # raw measurements, not scaled
EPOCHS, BATCH_SIZE = 200, 5
loss = categorical_crossentropy  # Keras's, on the sigmoid's outputs


def model():
    return nn.Sequential(
        dense(4, 4, "normal"),
        nn.ReLU(),
        dense(4, 3, "normal"),
        nn.Sigmoid(),  # the bug: a sigmoid before categorical_crossentropy, not a softmax
    )


def batches():
    return epoch_batches(X_TRAIN, ONE_HOT, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, ONE_HOT, EPOCHS, BATCH_SIZE)
