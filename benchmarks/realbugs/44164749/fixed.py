"""Stack Overflow 44164749 (https://stackoverflow.com/questions/44164749), fixed: a sigmoid per label.

The buggy program trains multi-hot targets (11 labels, several per row) through a softmax with
categorical_crossentropy, which makes the labels compete. This is the accepted answer and the benchmark's
correct code: a sigmoid on each output and binary_crossentropy, everything else unchanged (the same layers,
SGD(lr=0.01, decay=1e-6, momentum=0.9, nesterov=True), batch 2000), predictions thresholded at 0.5.
Ground truth (DeepFD): epoch lr act loss.

Porting: as in buggy.py (data in s44164749_data.py: sklearn multi-label rows with the post's 11 labels, since
the benchmark's single-label MNIST has no such bug; hidden layers 500/60 wide for the 10 s budget; 25 epochs of
12000 rows keep the original's 150 steps). Task = multi-label, float 0/1 targets (B, 11). A sigmoid followed by
binary_crossentropy is PyTorch's logits + nn.BCEWithLogitsLoss, so there is no sigmoid module. The held-out
rows (the post's X_test) are validation(). The original has no fixed seed; the runner seeds every run.
"""

from s44164749_data import N_LABELS, X_TEST, Y_TEST, X, Y, hidden_layers
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY = 25, 2000, 1e-6  # 25 epochs * 6 batches = the original's 5 * 30 = 150 steps
loss = nn.BCEWithLogitsLoss()  # the fix: sigmoid + binary_crossentropy, one independent yes/no per label


def model():
    return nn.Sequential(*hidden_layers(), dense(60, N_LABELS))  # logits: the sigmoid is inside the loss


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.01, momentum=0.9, nesterov=True)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
