"""Stack Overflow 59278771 (https://stackoverflow.com/questions/59278771), fixed: standardized iris, softmax output.

The buggy program feeds raw iris measurements to a 4-4-3 ReLU network whose output is a sigmoid under
categorical_crossentropy. Ground truth (DeepFD): act opt missing_prep.

Which fix: DeepFD's patch, not the benchmark's correct code. The correct code (MinMaxScaler, softmax, an extra
hidden layer of 8, KerasClassifier's default batch of 32 inside a 10-fold cross-validation) trains 1000 steps
instead of 6000 from Keras's tiny N(0, 0.05) start, and ported faithfully (first fold) it ends at 0.53 held-out
accuracy on 3 seeds of 6: worse than the buggy run. DeepFD's patch changes exactly the three ground-truth
faults on the buggy program: StandardScaler on the inputs (missing_prep), a softmax output and selu in the
hidden layer (act), and Keras's default SGD instead of Adam (opt); it keeps the layers, the init, 200 epochs and
batch 5, and trains to ~97% on every seed we tried.

Porting: task = 3-class classification with a softmax: logits (B, 3) + nn.CrossEntropyLoss on int64 class
indices (B,), no softmax module (Keras's softmax + categorical_crossentropy). `kernel_initializer="normal"` is
N(0, 0.05) with zero biases (kerasport.dense); SGD is Keras's default (lr 0.01). 200 epochs x 30 batches = 6000
steps on all 150 rows; no validation(), as in the buggy program. The original's numpy.random.seed(7) is replaced
by the runner's seeds.
"""

import torch
from s59278771_data import CLASSES, X
from sklearn.preprocessing import StandardScaler
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

X_TRAIN = torch.tensor(StandardScaler().fit_transform(X), dtype=torch.float32)  # the fix: standardized inputs
EPOCHS, BATCH_SIZE = 200, 5
loss = nn.CrossEntropyLoss()  # Keras: softmax output + categorical_crossentropy


def model():
    return nn.Sequential(
        dense(4, 4, "normal"),
        nn.SELU(),  # DeepFD's patch: selu instead of relu
        dense(4, 3, "normal"),  # logits: the softmax is in the loss
    )


def batches():
    return epoch_batches(X_TRAIN, CLASSES, BATCH_SIZE)


def optimizer(params):
    return sgd(params)  # DeepFD's patch: optimizer='sgd'


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_TRAIN, CLASSES, EPOCHS, BATCH_SIZE)
