"""The data of Stack Overflow 38648195: sklearn make_multilabel_classification, 20 features, 3 labels per row.

As in the program: make_multilabel_classification(n_features=20, n_classes=3) (word counts, each row 0 to 3 of
the 3 labels), then train_test_split(test_size=0.2). The benchmark's copy asks for 60000 rows; the post itself
uses 4000 (dlfaults/HowRealAreThey noted the difference), and 4000 keeps the run in budget: 3200 training rows
in batches of 20 for 20 epochs is 3200 steps, where 48000 rows would be 48000. Also: the 20-20-3 body both
programs share.

Seeds: the original draws from numpy's global generator, which the runner seeds. sklearn's generator first draws
each label's frequency, then finds each row's labels by drawing until it has enough distinct ones: when one
label's frequency is tiny that loop runs for minutes (numpy seed 1: 74 s for 4000 rows). So the generator gets a
seed drawn from numpy's global state, skipping those whose rarest label would be below 5% (kerasport.generator_seed).
The split draws from numpy's global state, as in the original.
"""

import torch
from sklearn.datasets import make_multilabel_classification
from sklearn.model_selection import train_test_split
from torch import nn

from benchmarks.realbugs.kerasport import dense, generator_seed

_x, _y = make_multilabel_classification(
    n_samples=4000, n_features=20, n_classes=3, random_state=generator_seed(n_classes=3, floor=0.05)
)
_x_train, _x_test, _y_train, _y_test = train_test_split(_x, _y, test_size=0.20)
X, X_TEST = torch.tensor(_x_train, dtype=torch.float32), torch.tensor(_x_test, dtype=torch.float32)
Y, Y_TEST = torch.tensor(_y_train, dtype=torch.float32), torch.tensor(_y_test, dtype=torch.float32)  # (B, 3) 0/1


def body() -> list:
    """Dense(20) relu, Dropout(0.5), Dense(20) relu, Dropout(0.5), Dense(3): Keras glorot-uniform, zero biases."""
    return [dense(20, 20), nn.ReLU(), nn.Dropout(0.5), dense(20, 20), nn.ReLU(), nn.Dropout(0.5), dense(20, 3)]
