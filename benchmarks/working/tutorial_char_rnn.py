"""pytorch/tutorials char-RNN classification: a hand-written RNN reads a name letter by letter and names its class.

Design kept (intermediate_source/char_rnn_classification_tutorial.py): letters are the 52 ASCII letters and
" .,;'" (57), anything else dropped from a string; a string is a (length, 1, 57) stack of one-hot letters; the
RNN cell is hand-written: hidden = tanh(i2h(letter) + h2h(hidden)) with i2h Linear(57, 128) and h2h
Linear(128, 128), output = LogSoftmax(h2o(hidden)) with h2o Linear(128, n_classes), the hidden state starting at
zeros and the output after the last letter being the prediction; nn.NLLLoss; plain SGD at 0.005 (the tutorial
adds -0.005 * grad to each parameter by hand after rnn.zero_grad() and backward: torch.optim.SGD(lr=0.005) takes
the same step); one example per step (batch of 1), drawn by picking a class uniformly at random, then a string of
that class uniformly at random; no held-out evaluation during training (the tutorial's confusion matrix is
drawn from the training strings after training).
Changed: the data. The 18 languages' surnames (a download) -> identifiers from 18 standard-library packages, the
package being the class: the names of the functions, methods and classes defined in the package's source
(asyncio, collections, concurrent, ctypes, email, encodings, http, idlelib, importlib, logging,
multiprocessing, re, tkinter, turtledemo, unittest, urllib, wsgiref, xml; their test folders left out), each
kept once per package and filtered to the tutorial's 57 letters (so "get_event_loop" reads "geteventloop"); the
classes are unbalanced as the languages are (47 to 1005 strings), which the uniform class draw evens out.
The letter loop runs inside forward() (the cell applied to each letter in turn, from a zero hidden state), not
in the training function as in the tutorial: the same computation, so that the model takes a whole string.
Steps: 100000 -> 8000 for CPU time (a run at 1 thread and with the doctor's own checks fits in about a minute).
"""

import ast
import random
import string
import sysconfig
from pathlib import Path

import torch
import torch.nn.functional as F
from common import epochs
from torch import nn

SOURCE = (
    "pytorch/tutorials intermediate_source/char_rnn_classification_tutorial.py"
    " @ 10098032865151e891c6074522207880f0e68fd3"
)
ALL_LETTERS = string.ascii_letters + " .,;'"
N_LETTERS, N_HIDDEN, RATE, N_ITERS = len(ALL_LETTERS), 128, 0.005, 8000
PACKAGES = (
    "asyncio", "collections", "concurrent", "ctypes", "email", "encodings", "http", "idlelib", "importlib",
    "logging", "multiprocessing", "re", "tkinter", "turtledemo", "unittest", "urllib", "wsgiref", "xml",
)  # fmt: skip
loss = nn.NLLLoss()


def only_letters(name: str) -> str:
    return "".join(c for c in name if c in ALL_LETTERS)


def package_identifiers(package: str) -> list[str]:
    """The names defined by def or class in a standard-library package (test folders left out), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"]) / package
    names = set()
    for path in sorted(root.rglob("*.py")):
        if any("test" in part for part in path.relative_to(root).parts[:-1]):
            continue
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and only_letters(node.name):
                names.add(only_letters(node.name))
    return sorted(names)


ALL_CATEGORIES = list(PACKAGES)
CATEGORY_LINES = {package: package_identifiers(package) for package in PACKAGES}
N_CATEGORIES = len(ALL_CATEGORIES)


def line_to_tensor(line: str) -> torch.Tensor:
    """A string as (length, 1, 57) one-hot letters."""
    tensor = torch.zeros(len(line), 1, N_LETTERS)
    for i, letter in enumerate(line):
        tensor[i][0][ALL_LETTERS.find(letter)] = 1
    return tensor


def random_training_example() -> tuple[torch.Tensor, torch.Tensor]:
    category = random.choice(ALL_CATEGORIES)
    line = random.choice(CATEGORY_LINES[category])
    return line_to_tensor(line), torch.tensor([ALL_CATEGORIES.index(category)], dtype=torch.long)


class RNN(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def step(self, letter: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = F.tanh(self.i2h(letter) + self.h2h(hidden))
        return self.softmax(self.h2o(hidden)), hidden

    def init_hidden(self) -> torch.Tensor:
        return torch.zeros(1, self.hidden_size)

    def forward(self, line: torch.Tensor) -> torch.Tensor:
        hidden = self.init_hidden()
        for i in range(line.size(0)):
            output, hidden = self.step(line[i], hidden)
        return output


def model() -> nn.Module:
    return RNN(N_LETTERS, N_HIDDEN, N_CATEGORIES)


def batches():
    return [random_training_example() for _ in range(1000)]


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE)


def train(Doctor):
    rnn = model()
    opt = optimizer(rnn.parameters())
    doctor = Doctor(rnn, opt, loss)

    def stream():
        for _ in range(epochs(N_ITERS)):
            yield random_training_example()

    for line_tensor, category_tensor in doctor.watch(stream()):
        rnn.zero_grad()
        output = rnn(line_tensor)
        step_loss = loss(output, category_tensor)
        step_loss.backward()
        doctor.after_backward(step_loss)
        opt.step()
    return doctor
