"""Stack Overflow 59282996 (https://stackoverflow.com/questions/59282996), fixed: two classes, 30 epochs.

The buggy program (buggy.py) tags timesteps with labels 0 (padding), 1, 2 on three sigmoid outputs for 10 SGD
steps. The fix followed is DeepFD's repair.py (Benchmark/Subjects/59282996/epoch_30/): labels 1 -> 0 and
2 -> 1 (the padding label 0 stays 0, so visible padded timesteps now count as class 0), two outputs, 30 epochs.
The scrambled reshape of the inputs is kept, as in the repair. Ground truth (DeepFD): epoch
training_data_quality layer_props.

Porting: as buggy.py (s59282996_data: the masked BiLSTM, float one-hot targets (B, 20, 2) with zero rows where
masked, Keras's masked sparse_categorical_crossentropy on the sigmoid's probabilities, SGD with Keras decay,
one batch per epoch, no validation(), the runner's seed).
"""

from s59282996_data import LABELS, MaskedBiLSTMTagger, X, masked_crossentropy, targets

from benchmarks.realbugs.kerasport import epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY, CLASSES = 30, 20, 1e-6, 2
Y = targets((LABELS - 1).clamp(min=0), CLASSES)  # the repair: 1 -> 0, 2 -> 1, padding 0 -> 0
loss = masked_crossentropy


def model():
    return MaskedBiLSTMTagger(classes=CLASSES)


def batches():
    return epoch_batches(X, Y, BATCH_SIZE)


def optimizer(params):
    return sgd(params, lr=0.01, momentum=0.9, nesterov=True)


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X, Y, EPOCHS, BATCH_SIZE, decay=DECAY)
