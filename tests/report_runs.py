"""Short real runs of the doctor for the report's JSON and figure tests: a tiny MLP on 8 random features.

Each run is a probe of 60 to 200 steps (about half a second on one thread), every step watched (no cost budget:
on steps this short the budget's sample rests on the host's load, and these tests are about the report's form,
not the budget's; tests/test_cost_budget.py tests that); `run(case)` gives its report and
`CASES` says what each is: a healthy run, planted faults (a rate too high, a rate too low, NaN inputs), a run
that learns despite its oddity (a warning only), and a loop that never calls zero_grad (its own loop, the
doctor's three lines).
"""

import functools

import torch
from torch import nn

from doctor import Doctor, Report, probe

_g = torch.Generator().manual_seed(0)
X = torch.randn(640, 8, generator=_g)  # 512 to train on, 128 held out
Y = (X[:, 0] + X[:, 1] > 0).long()
VALIDATION = [(X[512:], Y[512:])]


def batches(scale: float = 1.0, nan: bool = False) -> list:
    """One pass over the examples in batches of 32: scaled, or with one NaN input value in each batch."""
    out = []
    for i in range(0, 512, 32):
        x = X[i : i + 32] * scale
        if nan:
            x = x.clone()
            x[0, 0] = float("nan")
        out.append((x, Y[i : i + 32]))
    return out


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def dead_start() -> nn.Module:
    """A wide hidden layer whose biases start at -1.6: nine in ten of its ReLUs are dead on the first batch."""
    net = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 2))
    with torch.no_grad():
        net[0].bias.fill_(-1.6)
    return net


def _probe(optimizer, steps: int = 60, scale: float = 1.0, nan: bool = False, model=mlp) -> Report:
    torch.manual_seed(0)
    return probe(
        model,
        lambda: batches(scale, nan),
        nn.functional.cross_entropy,
        optimizer,
        steps=steps,
        validation=VALIDATION,
        budget=None,
    )


def _no_zero_grad() -> Report:
    """The issue's example: a loop that never clears .grad, watched with the doctor's three lines."""
    torch.manual_seed(0)
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    doctor = Doctor(net, optimizer, nn.functional.cross_entropy, batches() * 4, validation=VALIDATION, budget=None)
    for x, y in doctor:
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()  # no optimizer.zero_grad(): every step adds to the last one's gradients
        doctor.after_backward(loss)
        optimizer.step()
    return doctor.report()


# Each case: how to run it, and its headline (the verdict and the warnings counted).
CASES = {
    "healthy": (lambda: _probe(lambda p: torch.optim.Adam(p, lr=1e-2), steps=200), "healthy"),
    "a rate too high": (lambda: _probe(lambda p: torch.optim.SGD(p, lr=10.0)), "lr_too_high"),
    "a rate too low": (lambda: _probe(lambda p: torch.optim.SGD(p, lr=1e-6)), "lr_too_low"),
    "NaN inputs": (lambda: _probe(lambda p: torch.optim.SGD(p, lr=0.1), nan=True), "nonfinite_loss"),
    # The living tenth of the layer is still wider than the task needs: the run reaches the clean copy of its model.
    "dead ReLUs at the start, overcome": (
        lambda: _probe(lambda p: torch.optim.Adam(p, lr=1e-2), steps=200, model=dead_start),
        "healthy, 1 warning",
    ),
    "no zero_grad": (_no_zero_grad, "no_zero_grad"),
}


@functools.cache
def run(case: str) -> Report:
    """The report of one case, run once per test session (on one thread: tiny models run fastest on one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return CASES[case][0]()
    finally:
        torch.set_num_threads(threads)
