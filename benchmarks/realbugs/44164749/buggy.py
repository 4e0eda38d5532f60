"""Stack Overflow 44164749 (https://stackoverflow.com/questions/44164749), buggy: multi-label with a softmax.

"How does Keras handle multilabel classification?": the targets are multi-hot (11 labels, several per row) but
the model ends in a softmax trained with categorical_crossentropy, as for one label per row. A softmax makes the
labels compete (its outputs sum to 1), so a row with two or three labels can never have them all near 1: at the
post's 0.5 threshold at most one label is predicted. Fix (fixed.py, the accepted answer and the benchmark's
correct code): a sigmoid per label and binary_crossentropy. Ground truth (DeepFD): epoch lr act loss.

Porting:
- Data: see s44164749_data.py. The benchmark's MNIST has one label per row, where this program is correct; the
  post's multi-hot targets are what makes it a bug, so the rows are sklearn multi-label ones with the post's 11
  labels. Task = multi-label, float 0/1 targets (B, 11); a held-out set as the post's X_test is validation().
- Softmax + categorical_crossentropy is PyTorch's logits + nn.CrossEntropyLoss; given float multi-hot targets it
  computes Keras's -sum(y * log softmax) exactly, so there is no softmax module (keeping one would be a double
  softmax the original does not have).
- Hidden layers 500 and 60 wide, not 5000 and 600 (s44164749_data.hidden_layers: the 10 s budget); Keras
  glorot-uniform weights and zero biases (kerasport.dense).
- SGD(lr=0.01, decay=1e-6, momentum=0.9, nesterov=True), batch 2000 as in the post. 12000 rows instead of
  MNIST's 60000, so 25 epochs instead of 5 keep the original's 150 optimizer steps.
- The original has no fixed seed; the runner seeds every run.
"""

from s44164749_data import N_LABELS, X_TEST, Y_TEST, X, Y, hidden_layers
from torch import nn

from benchmarks.realbugs.kerasport import dense, epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY = 25, 2000, 1e-6  # 25 epochs * 6 batches = the original's 5 * 30 = 150 steps
loss = nn.CrossEntropyLoss()  # softmax + categorical_crossentropy, fed multi-hot targets: the bug


def model():
    return nn.Sequential(*hidden_layers(), dense(60, N_LABELS))  # logits: the softmax is inside the loss


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.01, momentum=0.9, nesterov=True)


def validation():
    return [(X_TEST, Y_TEST)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
