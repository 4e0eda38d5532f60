"""Stack Overflow 31627380 (https://stackoverflow.com/questions/31627380), buggy: Titanic on raw label codes.

A 10-512-2 network (ReLU, Dropout 0.5, softmax) predicts Titanic survival with categorical_crossentropy and Adam,
batch 4, 10 epochs, validation_split 0.2. Its inputs are unscaled label codes and amounts (Name up to 1306, Ticket
up to 928, Fare up to 512), so the first logits are in the hundreds: in Keras the clipped softmax probabilities
give no gradient and the loss stays flat (the post's symptom, about 6 per batch). The benchmark calls the output
activation, the loss and the optimizer wrong (ground truth, DeepFD: opt act loss): its correct code uses sigmoid +
binary_crossentropy, DeepFD's patch SGD. Neither fixes the run (measured on this port: validation accuracy 0.68
to 0.75 with the benchmark's change, the majority class, 0.64, with SGD); standardizing the inputs does (0.85 to
0.87). fixed.py makes the benchmark's change and standardizes the inputs (see there).

Porting: task = multi-class with 2 classes (softmax over two units). Keras's softmax + categorical_crossentropy is
CrossEntropyLoss on the last Dense's output, so the model ends at that Dense (logits, no softmax module) and the
targets are int64 class indices (B,) (the program's to_categorical one-hot rows). Because the logits are not
clipped as Keras's probabilities are, this port's loss does fall (from tens to about 1.2) while the validation
accuracy stays near the majority class: the symptom is a poor score with huge early losses, not a flat loss.
Dense layers are Keras's (glorot-uniform, zero biases: kerasport.dense); Adam at Keras's defaults. 712 training
rows in batches of 4 for 10 epochs: 1780 steps. validation_split=0.2 is validation(): the last 179 rows, as Keras
takes them. The data preparation is the program's (s31627380_data.py). The original's np.random.seed(1919) is
replaced by the runner's seeds.
"""

from s31627380_data import N_FEATURES, X_train, X_val, y_train, y_val
from torch import nn

from benchmarks.realbugs.kerasport import adam, dense, epoch_batches, fit

EPOCHS, BATCH_SIZE = 10, 4
loss = nn.CrossEntropyLoss()  # Keras's softmax + categorical_crossentropy


def model():
    return nn.Sequential(
        dense(N_FEATURES, 512),
        nn.ReLU(),
        nn.Dropout(0.5),
        dense(512, 2),  # softmax, folded into the loss
    )


def batches():
    return epoch_batches(X_train, y_train, BATCH_SIZE)


def optimizer(params):
    return adam(params)


def validation():
    return [(X_val, y_val)]


def train(Doctor):
    net = model()
    return fit(Doctor, net, optimizer(net.parameters()), loss, X_train, y_train, EPOCHS, BATCH_SIZE)
