"""The data of Stack Overflow 34673164: US counties, 16 numeric columns and the winner (Barack Obama/Mitt Romney).

dataset.csv is Wardat-ISU/DeepLocalize Benchmark/StackOverflow/34673164/Buggy Model/dataset.csv: 10 lines, no
header. pd.read_csv takes the first line as the header, as in the original, so 9 rows remain (4 Obama, 5
Romney). Columns range from -1.2 to 662628 (population, income, ...), unscaled.
"""

from pathlib import Path

import pandas as pd
import torch
from sklearn.preprocessing import LabelEncoder

data = pd.read_csv(Path(__file__).with_name("dataset.csv"), delimiter=",").values
X = torch.tensor(data[:, 0:16].astype(float), dtype=torch.float32)
CLASSES = torch.tensor(LabelEncoder().fit_transform(data[:, 16]), dtype=torch.int64)  # 0: Obama, 1: Romney
ONE_HOT = torch.nn.functional.one_hot(CLASSES, 2).float()  # np_utils.to_categorical: (9, 2)
