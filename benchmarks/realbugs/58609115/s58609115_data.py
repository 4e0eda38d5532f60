"""Stack Overflow 58609115's data: export78.csv (DeepLocalize Benchmark/StackOverflow/58609115/Buggy Code/).

Each row is a number (1 .. ~1e9) and a code for its length and leading digit (69 distinct codes). The original
reads it with pandas (so the first row becomes the header and is lost, 2208 rows remain), one-hot encodes the
code column (OneHotEncoder: categories in sorted order) and learns code from number, the raw number as the one
input feature (not scaled, in both the buggy and the corrected program). train_test_split(test_size=0.2) is
unseeded in the original, so the runner's seed picks the split.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import train_test_split

frame = pd.read_csv(Path(__file__).with_name("export78.csv"))
number = frame.iloc[:, 0].to_numpy(dtype=np.float32).reshape(-1, 1)
codes, label = np.unique(frame.iloc[:, 1].to_numpy(), return_inverse=True)  # OneHotEncoder's column order
CLASSES = len(codes)  # 69
x_train, x_test, y_train, y_test = train_test_split(number, label, test_size=0.2)

X, X_TEST = torch.from_numpy(x_train), torch.from_numpy(x_test)
Y, Y_TEST = torch.from_numpy(y_train).long(), torch.from_numpy(y_test).long()  # class indices
Y_ONEHOT, Y_TEST_ONEHOT = (torch.nn.functional.one_hot(t, CLASSES).float() for t in (Y, Y_TEST))
