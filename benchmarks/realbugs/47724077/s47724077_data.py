"""The data of Stack Overflow 47724077: UCI Adult (`adult.data`, 32561 rows, 14 attributes, income <=50K/>50K).

adult.data.gz is Wardat-ISU/DeepLocalize Benchmark/StackOverflow/47724077/Buggy Code/adult.data, gzipped.
The program label-encodes the eight text columns (1, 3, 5, 6, 7, 8, 9, 13) and then writes
`keras.utils.to_categorical(codes)` back into each one column: a (32561, k) array does not fit in one column
(that is the post's crash, "could not broadcast input array"), and a 14-input model (`input_dim=14`) can only
mean one number per column, so the inputs here are the 14 columns with the text ones label-encoded.
The numeric columns keep their raw scale (age ~40, fnlwgt ~190000, capital-gain up to 99999).

Subsample: the first ROWS = 8000 rows (24.6%; 76.1% <=50K, as in the whole file). 50 epochs of batch 100 on all
32561 rows is 16300 steps, too long for the ~10 s a run may take on one CPU thread; 8000 rows keep the epochs,
the batch size and the class balance (4000 steps). The encoders are fitted on the whole file, as the original.
"""

from pathlib import Path

import pandas as pd
import torch
from sklearn.preprocessing import LabelEncoder

frame = pd.read_csv(Path(__file__).with_name("adult.data.gz"), header=None)
X = frame.iloc[:, 0:14].copy()
for column in [1, 3, 5, 6, 7, 8, 9, 13]:
    X[column] = LabelEncoder().fit_transform(X[column])
ROWS = 8000
X = X.to_numpy(dtype="float32")[:ROWS]
Y = torch.tensor(LabelEncoder().fit_transform(frame[14])[:ROWS], dtype=torch.int64)  # 0: <=50K, 1: >50K
