"""Would more data help? The data learning curve (harness/reference.py) and its forecast (analysis/data_forecast.py).

The references refitted on growing shares of the run's examples, the gain the curve forecasts from twice the
examples, the line the report prints, and the candidate overfitting checks the study compares.
"""

import math

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from analysis.checks.evidence import data_line
from analysis.data_forecast import data_forecast
from analysis.features import features
from harness.reference import CURVE_MIN_EXAMPLES, reference_fit


def test_a_power_law_curve_is_carried_one_doubling_further():
    # The error halves with every doubling (slope -1): at twice the examples it halves once more.
    examples = [100, 200, 400, 800]
    errors = [0.4, 0.2, 0.1, 0.05]
    made = data_forecast(examples, [1 - e for e in errors])
    assert made.slope == pytest.approx(-1.0)
    assert made.doubled == pytest.approx(1 - 0.025)
    assert made.gain == pytest.approx(0.025)
    assert "at twice the examples (1600) 98%" in made.line()


def test_a_flat_or_falling_curve_forecasts_no_gain():
    assert data_forecast([100, 200, 400], [0.8, 0.8, 0.8]).gain == pytest.approx(0.0)
    assert data_forecast([100, 200, 400], [0.9, 0.85, 0.8]).gain == 0.0  # worse with more data: no gain, not a loss
    assert data_forecast([100, 200], [1.0, 1.0], held_out=200).gain == pytest.approx(0.0)


def test_too_short_a_curve_gives_no_forecast():
    assert data_forecast([100], [0.9]) is None
    assert data_forecast([], []) is None
    assert data_forecast(None, None) is None
    assert data_forecast([100, 200], [0.9, math.nan]) is None


def _digits(share: float, seed: int = 0):
    x, y = load_digits(return_X_y=True)
    train, val = train_test_split(np.arange(len(y)), test_size=0.25, random_state=seed, stratify=y)
    rng = np.random.default_rng(seed)
    kept = rng.permutation(train)[: max(int(share * len(train)), 40)]
    return x[kept], y[kept], x[val], y[val]


def test_the_references_curve_grows_to_the_examples_they_were_fitted_on():
    fit = reference_fit(*_digits(1.0))
    sizes, scores = fit["data_curve_examples"], fit["data_curve_val_acc"]
    assert sizes == sorted(sizes) and sizes[-1] == fit["reference_examples"] and len(sizes) == 4
    assert min(sizes) >= CURVE_MIN_EXAMPLES
    assert scores[-1] == fit["reference_val_acc"]  # the whole set's point is the references' own score
    assert scores[0] < scores[-1]  # digits: an eighth of the examples supports less than all of them


def test_fewer_examples_leave_more_to_gain():
    def gain(share):
        fit = reference_fit(*_digits(share))
        return features({**fit, "final_train_acc": 1.0, "final_val_acc": 0.5})["data_gain"]

    assert gain(0.1) > 2 * gain(1.0) > 0


def test_the_gated_candidate_reads_the_gain_only_past_a_measurable_gap():
    import pandas as pd

    from analysis.data_curve_study import candidates
    from analysis.features import feature_table

    fit = reference_fit(*_digits(0.1))
    wide = {**fit, "final_train_acc": 1.0, "final_val_acc": 0.7}
    # A gap of one example's worth on the held-out set is sampling error: not overfitting, whatever data would add.
    narrow = {**fit, "final_train_acc": 0.9, "final_val_acc": 0.9 - 1 / fit["reference_val_examples"]}
    records = pd.DataFrame([wide, narrow, {**fit, "final_train_acc": 1.0, "final_val_acc": math.nan}])
    table = feature_table(records)
    (gated,) = candidates(table, records)["the data gain where the gap is beyond 2 standard errors"]
    assert gated[0] == pytest.approx(table.data_gain[0]) and table.data_gain[0] > 0
    assert gated[1] == 0.0
    assert math.isnan(gated[2])  # no validation accuracy, no gap


def test_the_report_line_says_what_the_curve_is_and_where_it_goes():
    line = data_line(reference_fit(*_digits(0.25)))
    assert line.startswith("quick references fitted on ") and "at twice the examples" in line
    assert data_line({}) == "no data learning curve (it needs quick references)"


def test_the_doctors_report_answers_would_more_data_help():
    import torch
    from torch import nn

    from doctor import Doctor

    torch.manual_seed(0)
    inputs = torch.randn(256, 8)
    targets = (inputs[:, 0] + inputs[:, 1] > 0).long()
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(net, optimizer, loss_fn)
    for x, y in doctor.watch([(inputs[i : i + 32], targets[i : i + 32]) for i in range(0, 256, 32)] * 4):
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    report = doctor.report()
    assert "would more data help? quick references fitted on " in str(report)
    carried = report.to_dict()["data_forecast"]
    assert carried["examples"] == list(report.data_forecast.examples) and len(carried["examples"]) >= 2
    assert carried["at_twice_the_examples"] >= carried["accuracies"][-1]
