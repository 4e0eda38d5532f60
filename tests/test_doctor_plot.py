"""The doctor's picture of a run (doctor/plot.py): what it draws is what was measured, against the thresholds used."""

import dataclasses
import math

import pytest
import torch
from conftest import ROOT
from torch import nn

from analysis.plots import pyplot
from analysis.rules import load_thresholds
from doctor import Report, probe
from doctor.__main__ import main
from doctor.plot import NOT_MEASURED, figure_of, plot_report

PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("one_thread")


class WithUnused(nn.Module):
    """A small MLP with a layer forward never calls: its two parameters never get a gradient."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.body(x)


_g = torch.Generator().manual_seed(0)
X = torch.randn(640, 10, generator=_g)  # 512 to train on, 128 held out
Y = X[:, :3].argmax(dim=1)


def batches():
    """One pass over the examples in 16 batches; the ninth has every label wrong: a loss spike once per pass."""
    for i in range(0, 512, 32):
        x, y = X[i : i + 32], Y[i : i + 32]
        yield x, (y + 1) % 3 if i == 256 else y


@pytest.fixture(scope="module")
def spiky() -> Report:
    return probe(
        WithUnused,
        batches,
        nn.functional.cross_entropy,
        lambda params: torch.optim.Adam(params, lr=0.01),
        steps=120,
        validation=[(X[512:], Y[512:])],
    )


@pytest.fixture
def figure(spiky):
    made = figure_of(spiky)
    yield made
    pyplot().close(made)


def panel(figure, label: str):
    return next(ax for ax in figure.axes if ax.get_label() == label)


def test_report_plot_writes_a_png(spiky, tmp_path):
    path = spiky.plot(tmp_path / "run.png")
    assert path == tmp_path / "run.png"
    assert path.read_bytes()[:8] == PNG


def test_the_title_holds_the_verdict_and_steps(spiky, figure):
    title = figure.get_suptitle()
    assert spiky.verdict in title and f"{spiky.steps} training steps" in title


def test_spike_markers_are_the_measured_spikes(spiky, figure):
    spikes = spiky.measurements["loss_spike_steps"]
    assert len(spikes) >= 3  # the wrong-label batch comes back every 16 steps
    (points,) = [c for c in panel(figure, "loss").collections if c.get_gid() == "loss_spikes"]
    xy = points.get_offsets()
    assert [int(x) for x in xy[:, 0]] == spikes
    assert list(xy[:, 1]) == [spiky.measurements["train_loss_curve"][s] for s in spikes]


def test_one_row_per_parameter_and_a_bar_only_where_a_gradient_was_measured(spiky, figure):
    m = spiky.measurements
    ax = panel(figure, "grad_norm")
    assert [t.get_text() for t in ax.get_yticklabels()] == m["param_names"]
    bars = [p for p in ax.patches if p.get_gid() == "grad_norm_bar"]
    assert len(bars) == sum(not missing for missing in m["grad_missing"]) == 4
    measured = [n for n, missing in zip(m["grad_norm"], m["grad_missing"], strict=True) if not missing]
    assert [b.get_width() for b in bars] == measured
    words = [t.get_text() for t in ax.texts]
    assert words.count("never got a gradient") == sum(m["grad_missing"]) == 2


def test_threshold_lines_are_the_thresholds_used(spiky, figure):
    m = spiky.measurements
    thresholds = load_thresholds(spiky.steps)
    lines = {line.get_gid(): line for ax in figure.axes for line in ax.lines if line.get_gid()}
    left = min(max(m["final_train_loss"] / m["first_loss"], 0.0), 1.0)
    # lr_too_low reads the peak of the drawn curve itself; lr_too_high reads peak x loss left, drawn as a peak.
    assert lines["threshold:lr_too_low"].get_ydata()[0] == thresholds["lr_too_low"]
    assert math.isclose(lines["threshold:lr_too_high"].get_ydata()[0], thresholds["lr_too_high"] / left)
    # starved_loader reads wait / compute, t; the panel draws the share of the loop, t / (1 + t).
    t = thresholds["starved_loader"]
    assert math.isclose(lines["threshold:starved_loader"].get_xdata()[0], t / (1 + t))
    # The curve drawn is the one measured.
    (curve,) = [line for line in panel(figure, "update_ratio").lines if not line.get_gid()]
    assert list(curve.get_ydata()) == m["update_ratio_curve"]


def test_given_thresholds_are_the_ones_drawn(spiky):
    thresholds = {**load_thresholds(spiky.steps), "lr_too_low": 1e-4, "starved_loader": 1.0}
    made = figure_of(spiky, thresholds)
    try:
        lines = {line.get_gid(): line for ax in made.axes for line in ax.lines if line.get_gid()}
        assert lines["threshold:lr_too_low"].get_ydata()[0] == 1e-4
        assert lines["threshold:starved_loader"].get_xdata()[0] == 0.5
    finally:
        pyplot().close(made)


def test_missing_series_say_not_measured(spiky, tmp_path):
    """A run without censuses (or a record that lacks them) draws nothing made up."""
    gone = {"census_steps": [], "grad_norm_curve": [], "update_ratio_curve": [math.nan], "data_wait_share": math.nan}
    measured = {**spiky.measurements, **gone}
    del measured["grad_norm"]
    bare = dataclasses.replace(spiky, measurements=measured)
    made = figure_of(bare)
    try:
        for label in ("grad_norm", "grad_norm_curve", "update_ratio", "data_wait"):
            ax = panel(made, label)
            assert any(t.get_text().startswith(NOT_MEASURED) for t in ax.texts), label
            assert not ax.lines and not ax.patches and not ax.collections, label
        assert not any(t.get_text().startswith(NOT_MEASURED) for t in panel(made, "loss").texts)
    finally:
        pyplot().close(made)
    assert plot_report(bare, tmp_path / "bare.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_the_command_line_writes_the_figure_and_keeps_its_status(tmp_path, capsys):
    recipe = ROOT / "examples" / "healthy_cnn.py"
    out = tmp_path / "out.png"
    plain = main([str(recipe), "--steps", "60"])
    plotted = main([str(recipe), "--steps", "60", "--plot", str(out)])
    assert plotted == plain
    assert out.read_bytes()[:8] == PNG
    assert f"figure written to {out}" in capsys.readouterr().err


def test_nan_gradients_are_recorded_as_nan_and_drawn_as_gaps():
    """A census whose gradients are NaN: before, its total norm was the sum over the other (none): 0.0."""
    from doctor import Doctor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    doctor = Doctor(model, optimizer, nn.functional.cross_entropy, census_every=1)
    for step, (x, y) in enumerate(doctor.watch(list(batches()))):
        x = torch.full_like(x, math.nan) if step == 3 else x
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        if torch.isfinite(loss):  # a loop that skips a step whose loss is not finite: the weights stay finite
            optimizer.step()
    report = doctor.report()
    curve = report.measurements["grad_norm_curve"]
    steps = list(report.measurements["census_steps"])
    assert math.isnan(curve[steps.index(3)]) and all(math.isfinite(n) for i, n in enumerate(curve) if steps[i] != 3)
    made = figure_of(report)
    try:
        ax = panel(made, "grad_norm_curve")
        assert "NaN or inf gradients (1 censuses)" in [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        pyplot().close(made)
