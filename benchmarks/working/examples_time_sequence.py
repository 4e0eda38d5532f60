"""pytorch/examples time_sequence_prediction: two stacked LSTM cells learn to continue sine waves, trained with LBFGS.

Design kept (time_sequence_prediction/generate_sine_wave.py and train.py): the data are sine waves,
sin(t / 20) for t = 0, 1, 2, ... shifted by a random integer in [-80, 80) per wave, in float64; the first 3 waves
test and the others train; the input is each wave without its last value, the target the wave
without its first (predict the next value). The model: LSTMCell(1, 51) -> LSTMCell(51, 51) -> Linear(51, 1) applied
at every time step from zero states, in double precision, optionally running on its own predictions for `future`
steps; nn.MSELoss; LBFGS at lr 0.8 (its defaults otherwise: up to 20 evaluations per step); one full batch of
all training waves; each step calls optimizer.step(closure), the closure doing zero_grad, forward, loss,
backward; after each step the test waves are predicted with 1000 future steps under no_grad and the loss on the
known part is computed; 15 steps.
Changed: for CPU time on one thread, 20 waves (from 100: 17 train, 3 test) of 200 steps (from 1000, so each wave
holds 1.6 periods of the sine instead of 8); the doctor's own fits (a fresh model trained 3 x 300 steps on 16
waves, and 2 x 100 full-batch steps on the waves trained on) step through every time step in Python, so their
cost grows with the length and, for the second, with the waves fed. The test prediction still runs 1000 steps
on. The waves are drawn at import from numpy's generator seeded by the benchmark's seed (the original seeds it
with 2 in a separate script and saves them to traindata.pt); no plots are drawn.
"""

import numpy as np
import torch
from common import epochs
from torch import nn

SOURCE = (
    "pytorch/examples time_sequence_prediction/train.py (+ generate_sine_wave.py)"
    " @ 77f55b912142e11fcfdf5b530231fb9c52f181e8"
)
PERIOD, LENGTH, WAVES, HIDDEN = 20, 200, 20, 51  # the original: 20, 1000, 100, 51
STEPS, RATE, FUTURE, TEST_WAVES = 15, 0.8, 1000, 3


def sine_waves() -> np.ndarray:
    """WAVES sine waves of LENGTH steps, each shifted by a random whole number of steps."""
    shifts = np.random.randint(-4 * PERIOD, 4 * PERIOD, WAVES).reshape(WAVES, 1)
    t = np.arange(LENGTH) + shifts
    return np.sin(t / PERIOD).astype("float64")


DATA = torch.from_numpy(sine_waves())  # drawn at import: the runner seeds numpy first
TRAIN_INPUT, TRAIN_TARGET = DATA[TEST_WAVES:, :-1], DATA[TEST_WAVES:, 1:]
TEST_INPUT, TEST_TARGET = DATA[:TEST_WAVES, :-1], DATA[:TEST_WAVES, 1:]


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, HIDDEN)
        self.lstm2 = nn.LSTMCell(HIDDEN, HIDDEN)
        self.linear = nn.Linear(HIDDEN, 1)

    def step(self, value, states):
        h1, c1, h2, c2 = states
        h1, c1 = self.lstm1(value, (h1, c1))
        h2, c2 = self.lstm2(h1, (h2, c2))
        return self.linear(h2), (h1, c1, h2, c2)

    def forward(self, waves, future: int = 0):
        states = tuple(waves.new_zeros(waves.size(0), HIDDEN) for _ in range(4))
        predictions = []
        for value in waves.split(1, dim=1):
            prediction, states = self.step(value, states)
            predictions.append(prediction)
        for _ in range(future):  # continue from its own last prediction
            prediction, states = self.step(prediction, states)
            predictions.append(prediction)
        return torch.cat(predictions, dim=1)


def model() -> nn.Module:
    return Sequence().double()


def batches():
    return [(TRAIN_INPUT, TRAIN_TARGET)]


def validation():
    return [(TEST_INPUT, TEST_TARGET)]


loss = nn.MSELoss()


def optimizer(params):
    return torch.optim.LBFGS(params, lr=RATE)


def train(Doctor):
    seq = model()
    opt = optimizer(seq.parameters())
    doctor = Doctor(seq, opt, loss, validation=validation())

    def full_batch():
        for _ in range(epochs(STEPS)):
            yield TRAIN_INPUT, TRAIN_TARGET

    for waves, target in doctor.watch(full_batch()):

        def closure(waves=waves, target=target):
            opt.zero_grad()
            output = loss(seq(waves), target)
            output.backward()
            doctor.after_backward(output)
            return output

        opt.step(closure)
        with torch.no_grad():  # the original predicts the test waves 1000 steps on and plots them
            predicted = seq(TEST_INPUT, future=FUTURE)
            loss(predicted[:, :-FUTURE], TEST_TARGET)
    return doctor
