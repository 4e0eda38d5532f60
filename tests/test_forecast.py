"""The learning-curve forecast (analysis/forecast.py), which answers: would longer training help.

A forecast fitted to a curve of known shape lands near where the curve goes on; a run stopped while its loss
fell steeply gains a large share of its fall, a flattened one next to nothing; the doctor's report carries the
forecast; the study scores forecasts against continuations.
"""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.features import features
from analysis.forecast import FORMS, MIN_STEPS, continuations, forecast, scores


def loss_curve(steps: int, span: float, floor: float = 0.1, noise: float = 0.02, seed: int = 0) -> list[float]:
    """An exponential approach from 2.3 to `floor` with time constant `span`, plus minibatch-like noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, steps + 1)
    return list(floor + (2.3 - floor) * np.exp(-t / span) + noise * rng.standard_normal(steps))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_forecast_lands_near_the_continuation(form):
    full = loss_curve(800, span=120)
    made = forecast(full[:200], form=form)
    assert made is not None and made.form == form
    value, half = made.at[400]
    truth = float(np.median(full[390:410]))
    assert half > 0
    # the exponential is the curve's own form: it lands close; the power law at least forecasts a further fall
    if form == "exponential":
        assert abs(value - truth) < 0.05
    assert value < made.now


def test_gain_share_is_large_while_falling_and_small_once_flat():
    falling = forecast(loss_curve(100, span=120))
    flat = forecast(loss_curve(600, span=40))
    assert falling.gain_share(4) > 0.3
    assert flat.gain_share(4) < 0.02


def test_the_feature_reads_the_training_loss():
    assert features({"train_loss_curve": loss_curve(100, span=120)})["forecast_gain"] > 0.3
    assert math.isnan(features({"train_loss_curve": [2.3] * 5})["forecast_gain"])  # too short to fit
    assert math.isnan(features({"train_loss_curve": [2.3] * 100})["forecast_gain"])  # nothing fell


def test_too_short_or_non_finite_curves_give_no_forecast():
    assert forecast([1.0] * (MIN_STEPS - 1)) is None
    assert forecast([math.nan] * 100) is None
    with pytest.raises(ValueError, match="choose from"):
        forecast(loss_curve(100, span=50), form="logistic")


def test_the_forecast_never_rises_above_where_the_run_stands():
    rising = list(np.linspace(0.5, 1.5, 100))  # a diverging loss is no saturating curve
    made = forecast(rising)
    assert made is None or all(value <= made.now + 1e-9 for value, _ in made.at.values())


def test_the_study_scores_forecasts_against_continuations():
    records = pd.DataFrame(
        [
            {"dataset": problem, "cell_id": f"{problem}-{seed}", "train_loss_curve": loss_curve(600, 90, seed=seed)}
            for problem in ("a", "b")
            for seed in range(3)
        ]
    )
    table = continuations(records, cuts=(100, 200))
    assert set(table.steps) == {200, 400}  # 4x 200 = 800 is past the runs' end: not scored
    result = scores(table)
    exponential = result[result.form == "exponential"]
    assert (exponential.mean_abs_error < exponential.flat_mean_abs_error).all()
    assert result.coverage_90.between(0, 1).all()


def test_the_doctors_report_carries_the_forecast():
    import torch
    from torch import nn

    from doctor import Doctor

    torch.manual_seed(0)
    inputs = torch.randn(256, 8)
    targets = (inputs[:, 0] > 0).long()
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(net, optimizer, loss_fn)
    batches = [(inputs[i : i + 32], targets[i : i + 32]) for i in range(0, 256, 32)] * 8
    for x, y in doctor.watch(batches):
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    report = doctor.report()
    assert report.forecast is not None and report.forecast.steps == 64
    assert "would longer training help? training loss now" in str(report)
    assert "at 2x the steps (128)" in str(report) and "at 4x the steps (256)" in str(report)
    carried = report.to_dict()["forecast"]
    assert carried["metric"] == "training loss" and [a["steps"] for a in carried["at"]] == [128, 256]


def test_the_range_stays_inside_what_the_loss_can_be():
    # A short noisy curve whose fit is loose: its error carried forward is wider than the loss itself.
    made = forecast([abs(v) for v in loss_curve(40, span=15, floor=0.01, noise=0.3, seed=3)])
    assert made is not None
    for steps, (value, _half) in made.at.items():
        low, high = made.range_at(steps)
        assert 0.0 <= low <= value <= high <= made.now
    assert made.at[80][1] > made.now  # the raw interval would have reached below 0 and above now
    assert "+-" not in made.summary() and f"now {made.now:.3g}" in made.line()
    # A loss that went below 0 in the run (a Gaussian likelihood's) may go on below it.
    negative = forecast([v - 1.0 for v in loss_curve(200, span=60, noise=0.05)])
    assert negative is not None and not negative.nonnegative
    assert negative.range_at(400)[0] < 0
