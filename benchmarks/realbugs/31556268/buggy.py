"""Stack Overflow 31556268 (https://stackoverflow.com/questions/31556268), buggy: XOR with mean absolute error.

"How to use Keras for XOR": a 2-4-1 sigmoid network trained on the four XOR rows with mean_absolute_error and
SGD(lr=0.05, decay=1e-6, momentum=0.11, nesterov=True) for 1000 epochs of one batch predicts nearly the same
value (0.3 to 0.7) for every row. The absolute error's gradient has the same size however near a row is, and
1000 small SGD steps are far too few. Fix (fixed.py; the accepted answer and the benchmark's correct code
agree): mean squared error, Adam, 10000 epochs. Ground truth (DeepFD): loss epoch lr opt.

Porting: task = binary with one output unit, float 0/1 targets (B, 1) and a (B, 1) output, as in Keras. The
sigmoid output does not pair with mean_absolute_error, so nn.Sigmoid stays as the last module and the loss is
Keras's mean_absolute_error (kerasport). Keras glorot-uniform weights and zero biases (kerasport.dense). The
decay is Keras's lr / (1 + decay * iterations), applied by kerasport.fit. Batch 4 = all four rows, reshuffled
each epoch (shuffle=True): 1000 steps. No validation(): the original predicts two of its training rows. The
original has no fixed seed; the runner seeds every run.
"""

from s31556268_data import X, Y, model

from benchmarks.realbugs.kerasport import epoch_batches, fit, mean_absolute_error, sgd

EPOCHS, BATCH_SIZE, DECAY = 1000, 4, 1e-6
loss = mean_absolute_error  # the bug (with the SGD below and the 1000 epochs)


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.05, momentum=0.11, nesterov=True)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
