"""The data of Stack Overflow 45337371: 1000 rows of 5 features from np.random.uniform, as DeepLocalize's run has.

The post itself trains nothing (it asks for the gradient of the output with respect to the input). DeepLocalize's
training version (Buggy Model/updatepy.py) fits x = np.random.uniform(size=(1000, 5, 1)) to targets drawn the
same way, independently of x, so there is nothing to learn from them. Here x keeps that generator (as a (1000, 5)
matrix, the post's input_shape=(5,)) and the target is a rule on it, whether the mean feature is above 0.5
(about half the rows): a learnable 0/1 label, so that the corrected network can show it trains. The bug does not
depend on the targets: a softmax over one unit is 1.0 for every input.
"""

import numpy as np
import torch

NUM_FEATURES = 5
X = torch.from_numpy(np.random.uniform(size=(1000, NUM_FEATURES))).float()
Y = (X.mean(dim=1, keepdim=True) > 0.5).float()  # one 0/1 target per row, shape (1000, 1), as in Keras
