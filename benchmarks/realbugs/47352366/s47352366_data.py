"""The data of Stack Overflow 47352366: MNIST through TensorFlow's input_data, replaced by scikit-learn's digits.

The program reads MNIST with input_data.read_data_sets(one_hot=True): 784 pixels scaled to [0, 1] and one-hot
labels. Here it is load_digits (1797 images of 8x8, values 0..16, divided by 16), flattened to 64 values per row
as the program's (784,) input, with the labels as int64 class indices and as float one-hot rows.
"""

import torch
from sklearn.datasets import load_digits

SIDE, N_CLASSES = 8, 10
digits = load_digits()
X = torch.tensor(digits.data / 16.0, dtype=torch.float32)  # (1797, 64), in [0, 1] as input_data gives
LABELS = torch.tensor(digits.target)  # int64 class indices (1797,)
ONE_HOT = torch.nn.functional.one_hot(LABELS, N_CLASSES).float()  # float (1797, 10), as one_hot=True gives

# The program takes 600 steps of mnist.train.next_batch(50) (0.55 of an MNIST epoch). On 1797 digits that many
# steps is 17 epochs of 36 batches (612 steps): the number of optimizer steps is kept, not the number of epochs.
EPOCHS, BATCH_SIZE = 17, 50


class Net(torch.nn.Module):
    """The program's CNN on an 8x8 image: conv5x5(32)-pool-conv5x5(64)-pool-Dense(1024)-Dropout(0.5)-Dense(10).

    Keras layers: convolution kernels and Dense weights glorot-uniform, biases Constant(0.1) on the two
    convolutions and the 1024-unit Dense, zero on the output Dense; 'same' padding; pools of 2 ('same': 8->4->2).
    `head` is the output activation after the last Dense (None: logits).
    """

    def __init__(self, head: torch.nn.Module | None):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = torch.nn.Linear(64 * (SIDE // 4) ** 2, 1024)
        self.fc2 = torch.nn.Linear(1024, N_CLASSES)
        for layer in (self.conv1, self.conv2, self.fc1, self.fc2):
            torch.nn.init.xavier_uniform_(layer.weight)
        for layer in (self.conv1, self.conv2, self.fc1):
            torch.nn.init.constant_(layer.bias, 0.1)
        torch.nn.init.zeros_(self.fc2.bias)
        self.features = torch.nn.Sequential(
            self.conv1, torch.nn.ReLU(), torch.nn.MaxPool2d(2, ceil_mode=True),
            self.conv2, torch.nn.ReLU(), torch.nn.MaxPool2d(2, ceil_mode=True),
            torch.nn.Flatten(), self.fc1, torch.nn.ReLU(), torch.nn.Dropout(0.5), self.fc2,
        )  # fmt: skip
        self.head = head if head is not None else torch.nn.Identity()

    def forward(self, x):
        return self.head(self.features(x.view(-1, 1, SIDE, SIDE)))
