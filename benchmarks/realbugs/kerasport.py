"""What a Keras 2 program means, in PyTorch: its defaults, its losses on probabilities, its fit loop.

The subjects are Keras programs. A literal port changes their meaning in three places, so every recipe
takes them from here:

- **Initialization.** Keras `Dense` starts from glorot-uniform weights and zero biases (PyTorch's `Linear`
  from a scaled uniform and a non-zero bias); `init='uniform'` is U(-0.05, 0.05) and `init='normal'` is
  N(0, 0.05) (Keras 1/2 `RandomUniform`/`RandomNormal` defaults); `'zero'` is zeros.
- **Losses take what the last layer gives.** Keras `categorical_crossentropy` takes probabilities: it rescales
  each row to sum to 1, clips to [1e-7, 1 - 1e-7] and takes -sum(y log p). After a softmax that is exactly
  PyTorch's `CrossEntropyLoss` on the logits, so a correct Keras model is ported without the softmax module
  (keeping it would create a double softmax that the original does not have). After anything else (a
  sigmoid, a ReLU) the original's meaning is `categorical_crossentropy` below. `binary_crossentropy` on
  probabilities clips the same way; after a sigmoid it is `BCEWithLogitsLoss`'s meaning.
- **Optimizers.** Keras defaults: SGD lr 0.01, Adam lr 0.001 with epsilon 1e-7, RMSprop lr 0.001 with rho 0.9
  and epsilon 1e-7, Adagrad lr 0.01; a `decay` argument divides the rate by (1 + decay * iterations).

`fit` runs Keras's `model.fit` loop under the doctor: each epoch a fresh shuffle (Keras shuffles by default),
batches of `batch_size` with a smaller last one, zero_grad / forward / loss / backward / step.
"""

import math

import numpy
import torch
from torch import nn

EPSILON = 1e-7  # keras.backend.epsilon(): the clip of its probability losses
EPOCH_CAP: int | None = None  # the tests set this to run every recipe on a short budget (None: as written)


def dense(n_in: int, n_out: int, init: str = "glorot_uniform") -> nn.Linear:
    """A Keras `Dense` layer's weights: `init` is glorot_uniform (the default), uniform, normal or zero."""
    layer = nn.Linear(n_in, n_out)
    with torch.no_grad():
        if init == "glorot_uniform":
            nn.init.xavier_uniform_(layer.weight)
        elif init == "uniform":
            nn.init.uniform_(layer.weight, -0.05, 0.05)
        elif init == "normal":
            nn.init.normal_(layer.weight, 0.0, 0.05)
        elif init == "zero":
            nn.init.zeros_(layer.weight)
        else:
            raise ValueError(f"unknown Keras init {init!r}: choose glorot_uniform, uniform, normal or zero")
        nn.init.zeros_(layer.bias)
    return layer


def categorical_crossentropy(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Keras `categorical_crossentropy` on a layer's outputs (not logits): one-hot or soft float targets."""
    p = probabilities / probabilities.sum(dim=-1, keepdim=True)
    p = p.clamp(EPSILON, 1 - EPSILON)
    return -(targets * p.log()).sum(dim=-1).mean()


def binary_crossentropy(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Keras `binary_crossentropy` on a layer's outputs (not logits), clipped like Keras, averaged."""
    p = probabilities.clamp(EPSILON, 1 - EPSILON)
    return -(targets * p.log() + (1 - targets) * (1 - p).log()).mean()


def mean_squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs - targets).pow(2).mean()


def mean_absolute_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs - targets).abs().mean()


class KerasDecay:
    """Keras's `decay=`: the rate of every group is lr0 / (1 + decay * iterations), set before each step."""

    def __init__(self, optimizer: torch.optim.Optimizer, decay: float):
        self.optimizer, self.decay, self.iterations = optimizer, decay, 0
        self.initial = [group["lr"] for group in optimizer.param_groups]

    def step(self) -> None:
        self.iterations += 1
        for group, lr in zip(self.optimizer.param_groups, self.initial, strict=True):
            group["lr"] = lr / (1 + self.decay * self.iterations)


def sgd(params, lr: float = 0.01, momentum: float = 0.0, nesterov: bool = False) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov)


def adam(params, lr: float = 0.001) -> torch.optim.Adam:
    return torch.optim.Adam(params, lr=lr, eps=EPSILON)


def rmsprop(params, lr: float = 0.001) -> torch.optim.RMSprop:
    return torch.optim.RMSprop(params, lr=lr, alpha=0.9, eps=EPSILON)


def epoch_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool = True) -> list:
    """One Keras epoch: a fresh permutation (unless shuffle=False), batches of batch_size, the last one smaller."""
    order = torch.randperm(len(x)) if shuffle else torch.arange(len(x))
    return [(x[order[i : i + batch_size]], y[order[i : i + batch_size]]) for i in range(0, len(x), batch_size)]


def fit(Doctor, model, optimizer, loss, x, y, epochs: int, batch_size: int = 32, shuffle: bool = True, decay=0.0):
    """Keras `model.fit(x, y, epochs, batch_size, shuffle)` under the doctor's three lines; returns the doctor.

    `batch_size=None` is Keras's default of 32. `decay` is the optimizer's Keras `decay=` argument.
    """
    batch_size = batch_size or 32
    epochs = epochs if EPOCH_CAP is None else min(epochs, EPOCH_CAP)
    doctor = Doctor(model, optimizer, loss)
    schedule = KerasDecay(optimizer, decay) if decay else None
    model.train()
    for _epoch in range(epochs):
        for xb, yb in doctor.watch(epoch_batches(x, y, batch_size, shuffle)):
            optimizer.zero_grad()
            batch_loss = loss(model(xb), yb)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            optimizer.step()
            if schedule is not None:
                schedule.step()
    return doctor


def generator_seed(n_classes: int, floor: float) -> int:
    """A seed for sklearn's make_multilabel_classification, from numpy's global (runner-seeded) state.

    Its label frequencies (the generator's first draw) all reach `floor`: with a label almost never drawn, the
    generator loops until it draws one (74 s for one seed of 4000 rows), so such seeds are skipped.
    """
    while True:
        seed = numpy.random.randint(2**31 - 1)
        frequencies = numpy.random.RandomState(seed).uniform(size=n_classes)  # what sklearn draws first
        if frequencies.min() / frequencies.sum() >= floor:
            return seed


def steps_of(n_examples: int, epochs: int, batch_size: int) -> int:
    """How many optimizer steps Keras takes: epochs times the batches of one epoch."""
    return epochs * math.ceil(n_examples / batch_size)
