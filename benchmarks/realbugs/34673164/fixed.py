"""Stack Overflow 34673164 (https://stackoverflow.com/questions/34673164), fixed: BatchNorm in front, sigmoid + BCE.

The buggy program feeds 16 unscaled columns (up to 662628) to a 16-64-64-2 tanh network with a softmax output
trained on mean_squared_error. This is the benchmark's correct code: a BatchNormalization layer before the
first Dense (it standardizes each input column over the batch), a sigmoid output and binary_crossentropy on the
two one-hot columns; SGD, dropout, init, 20 epochs and batch 16 are kept.
Ground truth (DeepFD): layers layer_props act loss.

Porting: task = two sigmoid outputs under binary_crossentropy, i.e. two independent 0/1 targets: float one-hot
targets (B, 2), logits (B, 2) + nn.BCEWithLogitsLoss (Keras's sigmoid + binary_crossentropy, no sigmoid module).
Keras's BatchNormalization (momentum 0.99, epsilon 1e-3) is nn.BatchNorm1d(16, momentum=0.01, eps=1e-3): in
training it uses the batch's statistics; its running averages (used by model.evaluate) move only 18% of the way
in 20 steps, as in Keras. `init='uniform'` is U(-0.05, 0.05), zero biases (kerasport.dense). 20 steps. No
validation(): the original evaluates on its training rows. The original's np.random.seed(3) is replaced by the
runner's seeds.
"""

from s34673164_data import ONE_HOT, X
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY = 20, 16, 1e-6
loss = nn.BCEWithLogitsLoss()  # Keras: sigmoid output + binary_crossentropy


def model():
    return nn.Sequential(
        nn.BatchNorm1d(16, momentum=0.01, eps=1e-3),  # the fix: Keras BatchNormalization() on the inputs
        dense(16, 64, "uniform"),
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(64, 64, "uniform"),
        nn.Tanh(),
        nn.Dropout(0.5),
        dense(64, 2, "uniform"),  # logits: the sigmoid is in the loss
    )


def batches():
    return epoch_batches(X, ONE_HOT, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.1, momentum=0.9, nesterov=True)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, ONE_HOT, EPOCHS, BATCH_SIZE, decay=DECAY)
