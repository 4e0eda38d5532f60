"""The data of Stack Overflow 51930566: iris (scikit-learn's load_iris), split in halves as the program does.

The program one-hot encodes the three species and standardizes the features, splits the scaled rows with
train_test_split(test_size=0.5, random_state=2) and then splits again, the same way, the raw rows, so the buggy
program trains on unscaled features; the corrected one keeps the scaled split. Both splits (same rows, the
split's own random_state=2 kept: it fixes which rows are held out, not the training) are given here.
"""

import torch
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

iris = load_iris()
X_RAW, LABELS = iris["data"], iris["target"]
X_SCALED = StandardScaler().fit_transform(X_RAW)
N_FEATURES, N_CLASSES = 4, 3


def split(x):
    """(x_train, x_test, y_train, y_test) as float32 features and int64 class indices."""
    x_train, x_test, y_train, y_test = train_test_split(x, LABELS, test_size=0.5, random_state=2)
    as_x = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return as_x(x_train), as_x(x_test), torch.tensor(y_train), torch.tensor(y_test)


def one_hot(y):
    """Keras's OneHotEncoder targets: float (B, 3)."""
    return torch.nn.functional.one_hot(y, N_CLASSES).float()
