"""The data of Stack Overflow 34311586: XOR, six rows written in the program ((1,1) and (0,0) twice)."""

import torch

X = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
Y = torch.tensor([[0.0], [0.0], [1.0], [1.0], [0.0], [0.0]])  # one 0/1 target per row, shape (6, 1), as in Keras
