"""Too good to be true, and a model that reads nothing: the doctor's facts against their healthy twin.

A leaked column, validation copies of training examples and a model that ignores its inputs (harness/leak.py,
harness/instruments/inputs.py, analysis/checks/too_good.py), each in a user's own loop.
"""

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from torch import nn

from analysis.checks.too_good import IGNORES_INPUTS, LABEL_LEAK, VALIDATION_COPIES
from doctor import Doctor
from harness.leak import leak_fit

pytestmark = pytest.mark.usefixtures("one_thread")

TOO_GOOD = {IGNORES_INPUTS.verdict, LABEL_LEAK.verdict, VALIDATION_COPIES.verdict}


def problem(leak: bool = False, copies: float = 0.0, seed: int = 0):
    """A generated problem of 6 classes in 16 features (honest ceiling well under 1), split 3:1, standardized."""
    x, y = make_classification(
        n_samples=1200, n_features=16, n_informative=6, n_classes=6, n_clusters_per_class=1, class_sep=1.0,
        flip_y=0.05, random_state=seed,
    )  # fmt: skip
    x = x.astype(np.float32)
    if leak:  # a column computed from the label, in both splits
        x = np.hstack([x, y[:, None].astype(np.float32)])
    x = (x - x[:900].mean(axis=0)) / x[:900].std(axis=0)
    train, val = (
        (torch.from_numpy(x[:900]), torch.from_numpy(y[:900])),
        (torch.from_numpy(x[900:]), torch.from_numpy(y[900:])),
    )
    if copies:
        n = int(copies * 300)
        vx, vy = val[0].clone(), val[1].clone()
        vx[:n], vy[:n] = train[0][:n], train[1][:n]
        val = (vx, vy)
    return train, val


class Ignoring(nn.Module):
    """An MLP whose forward hands its first layer zeros instead of the batch (a placeholder left from testing)."""

    def __init__(self, inputs: int, ignore: bool):
        super().__init__()
        self.ignore = ignore
        self.net = nn.Sequential(nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 6))

    def forward(self, x):
        return self.net(torch.zeros_like(x) if self.ignore else x)


def doctor_run(leak: bool = False, copies: float = 0.0, ignore: bool = False, steps: int = 150):
    """A user's loop with the doctor's three lines: 150 steps of Adam on batches of 64."""
    (x, y), val = problem(leak, copies)
    torch.manual_seed(0)
    make = lambda: Ignoring(x.shape[1], ignore)  # noqa: E731
    model = make()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    validation = [(val[0][i : i + 100], val[1][i : i + 100]) for i in range(0, len(val[1]), 100)]
    doctor = Doctor(
        model, optimizer, loss_fn, validation=validation, model_factory=make, memorize_steps=30, capacity_steps=30
    )
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    batches = [(x[order[i : i + 64]], y[order[i : i + 64]]) for i in range(0, len(y) - 63, 64)]
    step = 0
    while step < steps:
        for xb, yb in doctor.watch(batches):
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
            step += 1
            if step == steps:
                break
    return doctor.report()


@pytest.fixture(scope="module")
def healthy():
    return doctor_run()


def test_the_healthy_twin_trips_none_of_the_three(healthy):
    m = healthy.measurements
    assert not TOO_GOOD & {f.verdict for f in healthy.findings}
    assert m["altered_input_effect"] > 0.5 and m["altered_input_loss_ratio"] > 1.5  # it reads and uses its inputs
    assert m["leak_column_acc"] < 0.6 < m["leak_rest_acc"]  # one column predicts far worse than the rest
    assert math.isnan(m["leak_column_z"])  # no column is almost perfect: not compared
    assert m["val_copy_share"] == 0 and m["val_copy_answered_share"] == 0


def test_a_model_that_ignores_its_inputs_is_named_and_its_loss_does_not_move():
    report = doctor_run(ignore=True)
    assert report.findings[0].verdict == "ignores_inputs"
    m = report.measurements
    assert m["altered_input_effect"] == 0 and m["altered_input_loss_ratio"] == 1.0
    assert "the loss on the altered inputs was 1.000x the loss on the real ones: the model never reads its inputs" in (
        report.findings[0].evidence
    )


def test_a_leaked_column_is_named_with_its_index_and_the_rest_s_accuracy(healthy):
    report = doctor_run(leak=True)
    finding = report.findings[0]
    assert finding.verdict == "label_leak" and finding.value > LABEL_LEAK.fact
    m = report.measurements
    assert m["leak_column"] == 16 and m["leak_column_acc"] == 1.0
    assert m["leak_rest_acc"] == pytest.approx(healthy.measurements["reference_val_acc"], abs=0.05)
    assert m["final_val_acc"] > healthy.measurements["final_val_acc"] + 0.05  # the leak makes validation too good
    assert "input column 16 alone predicts 100% of the held-out labels" in finding.evidence


def test_validation_copies_of_training_examples_are_named():
    report = doctor_run(copies=0.4)
    assert report.findings[0].verdict == "validation_copies"
    m = report.measurements
    # the copies of the 4 examples the loop never fed (its last partial batch) are not found
    assert m["val_copy_share"] == pytest.approx(0.4, abs=0.01) and m["val_copy_label_acc"] == 1.0
    assert "40% of the validation examples are exact copies of training examples" in report.findings[0].evidence


def test_the_leak_readings_on_examples_alone():
    (x, y), (vx, vy) = problem(leak=True)
    leaked = leak_fit(x, y, vx, vy)
    assert leaked["leak_column"] == 16 and leaked["leak_column_z"] > 3
    honest = leak_fit(x[:, :16], y, vx[:, :16], vy)
    assert math.isnan(honest["leak_column_z"]) and honest["leak_column_acc"] < 0.6
    # Without validation a quarter of the kept examples is held out: the column is still read, copies are not.
    alone = leak_fit(x, y)
    assert alone["leak_column"] == 16 and alone["leak_column_z"] > 2 and math.isnan(alone["val_copy_share"])
    copied = leak_fit(x[:, :16], y, torch.cat([x[:30, :16], vx[:70, :16]]), torch.cat([y[:30], vy[:70]]))
    assert copied["val_copy_share"] == pytest.approx(0.3) and copied["val_copy_answered_share"] == pytest.approx(0.3)


def test_the_probe_leaves_the_run_s_random_numbers_alone():
    from harness.instruments import Instruments

    class Noisy(nn.Module):  # draws random numbers in its forward: the probe must give their state back
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            return self.linear(x) + 0 * torch.rand(1)

    model = Noisy()
    instruments = Instruments(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    x, y = torch.randn(16, 4), torch.randint(3, (16,))
    for xb, yb in instruments.watch([(x, y)]):
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        instruments.after_backward(loss)
    state = torch.get_rng_state()
    ratio, effect = instruments.input_dependence.measure()  # four forwards, each drawing
    assert torch.equal(torch.get_rng_state(), state)
    assert effect > 0.1 and ratio > 0


def test_the_grid_judges_the_three_on_their_record_columns_ahead_of_the_fitted_rules():
    import pandas as pd
    from hand_records import THRESHOLDS, record

    from analysis.rules import RULES, diagnose, verdicts

    ignoring = record(altered_input_effect=0.0, altered_input_loss_ratio=1.0)
    leaked = record(leak_column_z=4.0, leak_column=64, leak_column_acc=1.0, leak_rest_acc=0.96)
    copied = record(val_copy_share=0.4, val_copy_label_acc=1.0, val_copy_answered_share=0.4, val_rest_acc=0.97)
    honest = record(altered_input_effect=1.4, altered_input_loss_ratio=150.0, leak_column_z=1.0)
    honest["val_copy_answered_share"] = 0.05  # a few natural copies: under a tenth
    table = verdicts(pd.DataFrame([ignoring, leaked, copied, honest, record()]), RULES, THRESHOLDS)
    assert table.verdict.tolist() == ["ignores_inputs", "label_leak", "validation_copies", "healthy", "healthy"]
    found = diagnose(leaked, RULES, THRESHOLDS)
    assert [f.verdict for f in found] == ["label_leak"]
    assert "input column 64 alone predicts 100% of the held-out labels" in found[0].evidence
    assert "quick references on every other column reach 96%: 4.0 standard errors" in found[0].evidence
    found = diagnose(copied, RULES, THRESHOLDS)[0].evidence
    assert "answers 100% of them: 40% of all validation examples" in found and "reach 97% on the others" in found
    everything = record(val_copy_share=1.0, val_copy_label_acc=1.0, val_copy_answered_share=1.0, val_rest_acc=math.nan)
    said = diagnose(everything, RULES, THRESHOLDS)[0].evidence
    assert "no validation example is left that is not such a copy" in said
    unmeasured = record(altered_input_effect=0.0, altered_input_loss_ratio=math.nan)
    assert "the loss on them was not measured" in diagnose(unmeasured, RULES, THRESHOLDS)[0].evidence
