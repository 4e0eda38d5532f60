"""Stack Overflow 59282996 (https://stackoverflow.com/questions/59282996), buggy: masked BiLSTM tagger, labels 0/1/2.

A masked bidirectional LSTM tags each timestep of 10 padded sequences with sparse_categorical_crossentropy on
three sigmoid outputs, SGD(lr=0.01, decay=1e-6, momentum=0.9, nesterov=True), 10 epochs of one batch (10 steps).
The labels are 1 and 2 with 0 for padding, so the model has three outputs, one of them for a padding "class";
the inputs were reshaped instead of transposed (see s59282996_data), so padding is scattered through the
sequences; and 10 steps are far too few: the loss barely moves and the tags stay near chance.
Fix (fixed.py): DeepFD's repair (Benchmark/Subjects/59282996/epoch_30/repair.py, the subject's folder name gives
30 epochs): labels shifted 1 -> 0, 2 -> 1 (padding 0 stays 0), two outputs instead of three, 30 epochs.
Ground truth (DeepFD): epoch training_data_quality layer_props.

Porting: data from DeepFD's dataset.pkl (dataset.npz, s59282996_data), the masked BiLSTM written out step by
step so that masked timesteps inside a sequence are skipped as Keras does, Keras LSTM/Dense initialization.
Task kind: sequence tagging; inputs (B, 20, 5), outputs (B, 20, C) probabilities, targets float one-hot (B, 20, C)
with an all-zero row per masked timestep. The sigmoid does not pair with sparse_categorical_crossentropy, so it
stays as the model's last module and the loss is Keras's on probabilities with Keras's mask
(masked_crossentropy). Batch size 20 > 10 sequences: one batch per epoch. Keras's decay is kerasport's. The
original trains without validation data, so there is no validation(); it has no fixed seed, and the runner
seeds every run.
"""

from s59282996_data import LABELS, MaskedBiLSTMTagger, X, masked_crossentropy, targets

from benchmarks.realbugs.kerasport import epoch_batches, fit, sgd

EPOCHS, BATCH_SIZE, DECAY, CLASSES = 10, 20, 1e-6, 3
Y = targets(LABELS, CLASSES)  # labels 0 (padding), 1, 2 as they are
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
