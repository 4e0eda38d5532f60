"""The data of Stack Overflow 59278771: Fisher's iris, 150 rows of four measurements in cm and three species.

iris.data is Wardat-ISU/DeepLocalize Benchmark/StackOverflow/59278771/Buggy Model/iris.data (the UCI file; the
benchmark's correct program reads scikit-learn's load_iris, which differs from it in two rows; both recipes read
this file so that only the fix differs). Rows are sorted by species, as in the file; Keras's fit shuffles.
"""

from pathlib import Path

import pandas as pd
import torch
from sklearn.preprocessing import LabelEncoder

frame = pd.read_csv(Path(__file__).with_name("iris.data"), header=None)
X = frame.iloc[:, 0:4].to_numpy(dtype="float32")  # sepal and petal length and width, 0.1 .. 7.9 cm
CLASSES = torch.tensor(LabelEncoder().fit_transform(frame[4]), dtype=torch.int64)  # 0, 1, 2
ONE_HOT = torch.nn.functional.one_hot(CLASSES, 3).float()  # np_utils.to_categorical, for the buggy loss
