"""The data of Stack Overflow 31627380: Kaggle's Titanic, train.csv (891 passengers) and test.csv (418).

Both files are DeepLocalize's Benchmark/StackOverflow/31627380/Buggy Code/{train,test}.csv. The preparation is the
program's: Age and Fare filled with their means, the categorical columns (Pclass, Name, Sex, SibSp, Parch, Ticket,
Cabin, Embarked) filled with 'missing' and label-encoded on train and test together (so test.csv is needed for
the codes), and nothing scaled: a passenger's Name is a code up to 1306, Ticket up to 928, Fare up to 512.
Survived is the target. Keras's validation_split=0.2 holds out the last 20% of the rows (179), unshuffled.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn import preprocessing

HERE = Path(__file__).parent
train = pd.read_csv(HERE / "train.csv", index_col=0)
test = pd.read_csv(HERE / "test.csv", index_col=0)
labels = torch.tensor(train.Survived.values)  # int64 0/1 (891,)
train = train.drop("Survived", axis=1)
columns = train.columns
for frame in (train, test):
    frame["Age"] = frame["Age"].fillna(frame["Age"].mean())
    frame["Fare"] = frame["Fare"].fillna(frame["Fare"].mean())
category_index = [0, 1, 2, 4, 5, 6, 8, 9]
for i in category_index:
    train[columns[i]] = train[columns[i]].fillna("missing")
    test[columns[i]] = test[columns[i]].fillna("missing")
train, test = np.array(train), np.array(test)
for i in category_index:
    lbl = preprocessing.LabelEncoder()
    lbl.fit(list(train[:, i]) + list(test[:, i]))
    train[:, i] = lbl.transform(train[:, i])
    test[:, i] = lbl.transform(test[:, i])

N_FEATURES = len(columns)  # 10
X = torch.tensor(train.astype(np.float32))
SPLIT = int(len(X) * (1 - 0.2))  # Keras's validation_split: the first 712 rows train, the last 179 validate
X_train, X_val = X[:SPLIT], X[SPLIT:]
y_train, y_val = labels[:SPLIT], labels[SPLIT:]  # class indices
Y_train, Y_val = (torch.nn.functional.one_hot(y, 2).float() for y in (y_train, y_val))  # to_categorical: (B, 2)

# The fix's standardized columns (sklearn.preprocessing.scale over all 891 rows, then the same split)
SCALED = torch.tensor(preprocessing.scale(train.astype(np.float64)), dtype=torch.float32)
SCALED_TRAIN, SCALED_VAL = SCALED[:SPLIT], SCALED[SPLIT:]
