"""The data of Stack Overflow 45442843: dataset.csv, numbers from 15000 to 25000, each labelled 0 or 1.

The file is DeepLocalize's Benchmark/StackOverflow/45442843/Buggy Code/dataset.csv (the post gives no data: it says
the inputs are numbers between 15K and 25K to be classed in two). Its labels follow a threshold near 20000.
pandas.read_csv takes the first row as the header (as in the program), leaving 999 rows; the first 80% (799) are
trained on and the last 199 are the program's validation_data. The corrected program standardizes the whole
column first (sklearn.preprocessing.scale), so both versions of the split are given here.
"""

from pathlib import Path

import pandas
import torch
from sklearn import preprocessing

values = pandas.read_csv(Path(__file__).with_name("dataset.csv"), delimiter=",").values
X_RAW = values[:, 0:1].astype(float)  # (999, 1)
Y = torch.tensor(values[:, 1].astype(bool), dtype=torch.float32).unsqueeze(1)  # 0/1 targets (999, 1), as Keras
TRAIN_SIZE = int(len(X_RAW) * 0.80)


def split(x):
    """(x_train, x_test, y_train, y_test): the first 80% of the rows and the rest, in file order."""
    x = torch.tensor(x, dtype=torch.float32)
    return x[:TRAIN_SIZE], x[TRAIN_SIZE:], Y[:TRAIN_SIZE], Y[TRAIN_SIZE:]


X_SCALED = preprocessing.scale(X_RAW)
