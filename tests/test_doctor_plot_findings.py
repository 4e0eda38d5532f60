"""The figure's finding panels (doctor/plot.py): each failing finding's own feature against its threshold, in words.

On real reports (tests/report_runs.py): a panel per failing finding, titled with the feature its rule read, the
value and threshold drawn being the ones judged; the loss panel last; legends that say what they show.
"""

import dataclasses
import math
import re

import pytest
from report_runs import CASES, run

from analysis.checks.base import Finding
from analysis.plots import pyplot
from analysis.rules import UNEXPLAINED
from doctor.plot import figure_of, read_at_start, series_of

BASE_PANELS = ["grad_norm_curve", "update_ratio", "grad_norm", "data_wait", "loss"]  # every figure has these
FAILING = ["a rate too high", "a rate too low", "NaN inputs", "no zero_grad"]  # the cases with a failing verdict


@pytest.fixture(scope="module")
def figures():
    made = {case: figure_of(run(case)) for case in CASES}
    yield made
    for figure in made.values():
        pyplot().close(figure)


def panel(figure, label: str):
    return next(ax for ax in figure.axes if ax.get_label() == label)


def labels(figure) -> list[str]:
    return [ax.get_label() for ax in figure.axes]


@pytest.mark.parametrize("case", FAILING)
def test_every_failing_finding_gets_a_panel_titled_with_its_feature(case, figures):
    report, figure = run(case), figures[case]
    assert report.failing
    assert labels(figure) == [f"finding:{f.verdict}" for f in report.failing] + BASE_PANELS
    for finding in report.failing:
        ax = panel(figure, f"finding:{finding.verdict}")
        assert ax.get_title().startswith(f"{finding.verdict}: {finding.feature}\n"), ax.get_title()
        (line,) = [line for line in ax.lines if line.get_gid() == f"finding_threshold:{finding.verdict}"]
        assert list(line.get_ydata()) == [finding.threshold] * 2  # the threshold the finding was judged against
        (judged,) = [c for c in ax.collections if c.get_gid() == f"judged:{finding.verdict}"]
        assert judged.get_offsets()[0][1] == finding.value  # the value it was judged on


def test_the_no_zero_grad_figure_shows_grad_carried_share_read_over_the_run():
    """The issue's example: the number the verdict rests on, at the run's last step (it is read over the run)."""
    report = run("no zero_grad")
    figure = figure_of(report)
    try:
        ax = panel(figure, "finding:no_zero_grad")
        assert "grad_carried_share" in ax.get_title()
        (judged,) = [c for c in ax.collections if c.get_gid() == "judged:no_zero_grad"]
        assert list(judged.get_offsets()[0]) == [report.steps - 1, report.features["grad_carried_share"]]
    finally:
        pyplot().close(figure)


@pytest.mark.parametrize(
    ("case", "verdict", "curve"),
    [
        ("a rate too high", "lr_too_high", "update_ratio_curve"),
        ("a rate too low", "lr_too_low", "update_ratio_curve"),
        ("NaN inputs", "nonfinite_loss", "train_loss_curve"),
    ],
)
def test_a_feature_recorded_over_the_run_is_drawn_over_it_and_peaks_or_ends_at_the_value_judged(
    case, verdict, curve, figures
):
    report = run(case)
    (finding,) = [f for f in report.failing if f.verdict == verdict]
    series = series_of(finding, report.measurements)
    assert series is not None and len(series.values) == len(report.measurements[curve])
    (drawn,) = [line for line in panel(figures[case], f"finding:{verdict}").lines if not line.get_gid()]
    assert list(drawn.get_ydata()) == series.values
    read = max(series.values) if series.reading == "peak" else series.values[-1]
    assert read == finding.value


def test_a_curve_that_does_not_give_the_value_judged_is_not_drawn_as_if_it_did():
    """Measurements changed after judging (or a curve thinned out): the value alone, as a marker at the end."""
    report = run("a rate too low")
    halved = [v / 2 for v in report.measurements["update_ratio_curve"]]
    changed = dataclasses.replace(report, measurements={**report.measurements, "update_ratio_curve": halved})
    (finding,) = [f for f in changed.failing if f.verdict == "lr_too_low"]
    assert series_of(finding, changed.measurements) is None
    figure = figure_of(changed)
    try:
        ax = panel(figure, "finding:lr_too_low")
        assert not [line for line in ax.lines if not line.get_gid()]
        (judged,) = [c for c in ax.collections if c.get_gid() == "judged:lr_too_low"]
        assert list(judged.get_offsets()[0]) == [changed.steps - 1, finding.value]
    finally:
        pyplot().close(figure)


@pytest.mark.parametrize(
    ("feature", "at_start"),
    [
        ("dead_at_init", True),  # on the initial weights
        ("first_loss_ratio", True),  # the first batch's loss over ln C
        ("input_rms", True),  # the first batch
        ("single_label_bce", True),  # the loss and targets of the first batch
        ("grad_carried_share", False),  # over every optimizer step
        ("capacity_fit", False),  # after training
        ("data_wait_ratio", False),  # the loop's totals
        ("nonfinite_losses", False),  # an unfitted fact's record column, counted over the run
    ],
)
def test_a_value_read_once_is_marked_at_the_step_it_was_read(feature, at_start):
    assert read_at_start(feature) is at_start


@pytest.mark.parametrize("case", ["healthy", "dead ReLUs at the start, overcome"])
def test_a_healthy_run_gets_no_finding_panel_and_the_loss_comes_last(case, figures):
    figure = figures[case]
    assert labels(figure) == BASE_PANELS  # warnings are listed in the title, not drawn as failures
    rows = {ax.get_label(): ax.get_subplotspec().rowspan.start for ax in figure.axes if ax.get_subplotspec()}
    assert rows["loss"] == max(rows.values())
    if run(case).warnings:
        assert "warnings: dead_relu" in figure.get_suptitle()


def test_unexplained_failure_which_no_one_feature_decides_gets_no_panel():
    report = run("healthy")
    said = Finding(UNEXPLAINED, "the run did not learn as it should", "overfit one batch", math.nan)
    figure = figure_of(dataclasses.replace(report, findings=(said,)))
    try:
        assert labels(figure) == BASE_PANELS and "verdict: unexplained_failure" in figure.get_suptitle()
    finally:
        pyplot().close(figure)


# A number followed by a colon, as in the old "loss spikes (1: the instruments' steps)": a count said in code.
JARGON = re.compile(r"\d:")


@pytest.mark.parametrize("case", CASES)
def test_every_legend_says_what_it_shows_in_words(case, figures):
    legends = [ax.get_legend() for ax in figures[case].axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        for text in legend.get_texts():
            words = text.get_text()
            assert not JARGON.search(words), words
            assert re.search(r"[a-z]{3}", words), words  # words, not a bare number or symbol
