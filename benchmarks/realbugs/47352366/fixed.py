"""Stack Overflow 47352366 (https://stackoverflow.com/questions/47352366), fixed: a softmax on the class outputs.

The buggy CNN ends in Dense(10, activation='relu') under categorical_crossentropy. This is the benchmark's
correct code (the fix a comment on the post suggests; the answer is about the kernel size): the last Dense has
activation='softmax'; the architecture, Adam and the 600 steps of 50 are unchanged.
Ground truth (DeepFD): act epoch.

Porting: task = multi-class, 10 digits. Keras's softmax + categorical_crossentropy is CrossEntropyLoss on the
last Dense's output, so the model ends at that Dense (logits, no softmax module) and the targets are int64 class
indices (B,). MNIST is replaced by scikit-learn's digits (8x8 in [0, 1]) and the 600 steps of 50 by 17 epochs of
1797 digits in batches of 50 (612 steps), keeping the number of optimizer steps (see s47352366_data.py). Keras
inits and Constant(0.1) biases are in the data module; Adam at Keras's defaults. No validation(): the program only
prints accuracy on training batches. It has no fixed seed; the runner seeds every run.
"""

from s47352366_data import BATCH_SIZE, EPOCHS, LABELS, Net, X
from torch import nn

from benchmarks.realbugs.kerasport import adam, epoch_batches, fit

loss = nn.CrossEntropyLoss()  # Keras's softmax + categorical_crossentropy


def model():
    return Net(head=None)  # the fix: softmax, folded into the loss


def batches():
    return epoch_batches(X, LABELS, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, LABELS, EPOCHS, BATCH_SIZE)
