"""The data of Stack Overflow 39525358: `sorted output.csv`, 20 rows of three numbers (65..70) and a 0/1 label.

Copied from Wardat-ISU/DeepLocalize Benchmark/StackOverflow/39525358/Buggy Code/sorted output.csv (renamed
sorted_output.csv). Like the original, np.loadtxt(skiprows=1) drops the file's first row, and
train_test_split(test_size=0.33, random_state=7) splits the rest into 13 training and 7 test rows: that split
is the program's own, fixed by its random_state, so it is kept (it seeds no generator of the runner).
"""

from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

DATASET = np.loadtxt(Path(__file__).with_name("sorted_output.csv"), delimiter=",", skiprows=1)
X, Y = DATASET[:, 0:3], DATASET[:, 3]


def split(x: np.ndarray) -> tuple:
    """The original's 67/33 split of inputs `x` and the labels, as float32 tensors; labels shaped (B, 1)."""
    x_train, x_test, y_train, y_test = train_test_split(x, Y, test_size=0.33, random_state=7)
    tensor = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return tensor(x_train), tensor(y_train).unsqueeze(1), tensor(x_test), tensor(y_test).unsqueeze(1)
