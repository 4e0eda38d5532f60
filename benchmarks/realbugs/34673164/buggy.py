"""Stack Overflow 34673164 (https://stackoverflow.com/questions/34673164), buggy: softmax + MSE on raw inputs.

A 16-64-64-2 tanh network with dropout 0.5 classifies counties (Obama/Romney) from 16 unscaled columns (up to
662628), with a softmax output trained on mean_squared_error, SGD lr 0.1 (momentum 0.9, Nesterov, decay 1e-6),
20 epochs of one batch (9 rows < batch 16): the first tanh layer is saturated by the raw inputs.
Fix (fixed.py, the benchmark's correct code): a BatchNormalization layer in front (it standardizes the inputs),
a sigmoid output with binary_crossentropy.
Ground truth (DeepFD): layers layer_props act loss. DeepFD's note: "The accuracy has already been 1 in
origin.py"; the dlfaults/HowRealAreThey audit: buggy not stable, "buggy is better than fix", no test data.

Porting: task = 2-class classification where the loss is not a cross-entropy on a softmax: the model keeps
nn.Softmax(dim=-1) as its last module, the loss is Keras's mean_squared_error, the targets are float one-hot
(B, 2) as in Keras. `init='uniform'` is U(-0.05, 0.05) with zero biases (kerasport.dense); nn.Dropout(0.5) is
Keras's Dropout. 20 epochs x 1 batch = 20 steps. The original evaluates nothing held out, so no validation().
The original's np.random.seed(3) is replaced by the runner's seeds.
"""

from s34673164_data import ONE_HOT, X
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, mean_squared_error, sgd

EPOCHS, BATCH_SIZE, DECAY = 20, 16, 1e-6
loss = mean_squared_error


def model():
    return nn.Sequential(
        dense(16, 64, "uniform"),  # the bug: raw inputs up to 662628 straight into tanh
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(64, 64, "uniform"),
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(64, 2, "uniform"),
        nn.Softmax(dim=-1),  # the bug: softmax outputs trained with mean_squared_error
    )


def batches():
    return epoch_batches(X, ONE_HOT, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.1, momentum=0.9, nesterov=True)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, ONE_HOT, EPOCHS, BATCH_SIZE, decay=DECAY)
