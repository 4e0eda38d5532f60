"""Bad input to the doctor: a verdict, a one-line refusal or the user's own traceback, never a wrong one.

Never a wrong record, a traceback of the doctor's or a wrong verdict.

Exit status of `python -m doctor RECIPE`: 0 healthy, 1 a fault named (a NaN or inf loss is `nonfinite_loss`),
2 the doctor cannot judge the run (one line `error: ...`), 3 the recipe's own code raised (its traceback).
Recipes are written into tmp_path: a tiny MLP on 8 random features, 30 probe steps, so that each run takes about
a second; most cases call the command line's main() in-process, two run it as a real process.
"""

import json
import math
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import ROOT
from torch import nn

from analysis.rules import VERDICTS
from doctor import Doctor
from doctor.__main__ import main
from doctor.nonfinite import READS_TRAINED_ACCURACY, VERDICT

# A recipe that trains; each case appends definitions that replace some of its pieces (the last one counts).
BASE = """
import torch
from torch import nn

STEPS = 30
torch.manual_seed(0)
X = torch.randn(256, 8)
Y = (X[:, 0] + X[:, 1] > 0).long()
loss = nn.CrossEntropyLoss()


def model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def batches():
    return [(X[i : i + 32], Y[i : i + 32]) for i in range(0, 256, 32)]


def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)


def validation():
    return [(X, Y)]
"""

ONE_LAYER = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 2)

    def forward(self, x):
        {body}


def model():
    return Net()
"""


def one_layer(body: str) -> str:
    """A recipe piece: a one-layer model whose forward is `body`."""
    return ONE_LAYER.format(body=body)


pytestmark = pytest.mark.usefixtures("one_thread")


def write(tmp_path, name: str, extra: str = "", base: str = BASE):
    """The recipe BASE + `extra` as tmp_path/NAME.py (NAME made a module name: recipes load as modules)."""
    path = tmp_path / f"{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}.py"
    path.write_text(base + textwrap.dedent(extra))
    return path


def doctor_cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


# ----- a NaN or inf loss: the verdict nonfinite_loss, with its first step and what was non-finite first ----------
NONFINITE = {
    "NaN inputs from step 0": (
        """
        def batches():
            xs = X.clone()
            xs[::5, 2] = float("nan")
            return [(xs[i : i + 32], Y[i : i + 32]) for i in range(0, 256, 32)]
        """,
        "the training loss was first NaN at step 0 (30 of 30 training losses were NaN or inf); non-finite first: the"
        " inputs: 7 of 256 input values of the batch at step 0 were NaN or inf",
        "look at the data",
    ),
    "an inf input at step 5": (
        """
        def batches():
            xs = X.clone()
            xs[5 * 32 + 7, 3] = float("inf")
            return [(xs[i : i + 32], Y[i : i + 32]) for i in range(0, 256, 32)]
        """,
        "the training loss was first NaN at step 5 (25 of 30 training losses were NaN or inf); non-finite first: the"
        " inputs: 1 of 256 input values of the batch at step 5 were NaN or inf",
        "look at the data",
    ),
    "a huge rate: the outputs overflow later": (
        """
        def optimizer(params):
            return torch.optim.SGD(params, lr=1e12)
        """,
        "the training loss was first NaN at step 2 (28 of 30 training losses were NaN or inf); non-finite first: the"
        " outputs: the model's outputs on the batch of step 2 had 64 of 64 values NaN or inf, from finite inputs and"
        " finite weights",
        "look at the model's forward",
    ),
    "log in forward: the outputs": (
        one_layer("return torch.log(self.layer(x))"),
        "the training loss was first NaN at step 0 (30 of 30 training losses were NaN or inf); non-finite first: the"
        " outputs: the model's outputs on the batch of step 0 had 31 of 64 values NaN or inf, from finite inputs and"
        " finite weights",
        "look at the model's forward",
    ),
    "log(0) in the loss": (
        """
        def loss(out, y):
            return -(out.softmax(1).gather(1, y[:, None]) * 0).log().mean()
        """,
        "the training loss was first inf at step 0 (30 of 30 training losses were NaN or inf); non-finite first: the"
        " loss: inputs, weights and the model's outputs were finite (largest |output| ",
        "look at the loss function",
    ),
    "sqrt at 0: the gradients, with a finite loss": (
        one_layer("out = self.layer(x)\n        return out + (out * 0).sqrt()"),
        "the training loss was first NaN at step 1 (29 of 30 training losses were NaN or inf); non-finite first: the"
        " gradients: the gradients of layer.weight, layer.bias were non-finite at step 0 while its loss was finite",
        "look at the backward pass",
    ),
    "NaN weights at initialization": (
        """
        def model():
            net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
            nn.init.constant_(net[2].bias, float("nan"))
            return net
        """,
        "the training loss was first NaN at step 0 (30 of 30 training losses were NaN or inf); non-finite first: the"
        " weights at initialization: the weights 2.bias were non-finite before any update",
        "look at the initialization",
    ),
    "Adam with eps=0 on dead units: the update": (
        """
        def model():
            net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
            nn.init.constant_(net[0].bias, -100.0)  # every unit dead: a zero gradient, and 0 / 0 in Adam's step
            return net

        def optimizer(params):
            return torch.optim.Adam(params, lr=1e-3, eps=0.0)
        """,
        "the training loss was first NaN at step 1 (29 of 30 training losses were NaN or inf); non-finite first: the"
        " weights: the weights 0.weight, 0.bias, 2.weight were non-finite after the update of step 0, whose"
        " gradients were finite",
        "look at the optimizer's update",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", NONFINITE)
def test_a_nonfinite_loss_is_the_verdict_and_names_what_was_nonfinite_first(tmp_path, capsys, case):
    extra, evidence, next_step = NONFINITE[case]
    status, out, err = doctor_cli(capsys, write(tmp_path, f"nonfinite {case}", extra))
    assert status == 1, err  # a fault was named
    lines = out.splitlines()
    assert lines[0] == "verdict: nonfinite_loss  (from 30 training steps)", out
    assert lines[1].startswith(f"  1. nonfinite_loss: {evidence}"), out
    assert lines[2].startswith(f"     next: {next_step}"), out
    # The fitted rules that read the trained model's accuracy are not judged on a model that outputs NaN.
    assert not any(f"{verdict}:" in out for verdict in READS_TRAINED_ACCURACY), out
    assert "no model factory given" not in out  # the recipe has model(): memorization ran, or says why not
    assert "=> no: fix nonfinite_loss first" in out


def test_nan_from_the_first_step_judges_no_fitted_rule_and_says_why_memorization_is_what_it_is(tmp_path, capsys):
    # What users saw: shuffled_labels as the verdict, no word of NaN, and "no model factory given".
    all_nan = """
    def batches():
        return [(torch.full((32, 8), float("nan")), Y[i : i + 32]) for i in range(0, 256, 32)]
    """
    status, out, _ = doctor_cli(capsys, write(tmp_path, "all_nan", all_nan), "--json", "-")
    report = json.loads(out)
    assert status == 1
    assert [f["verdict"] for f in report["findings"]] == [VERDICT]
    assert report["not_judged"].startswith("no fitted rule was judged: the inputs were non-finite from the first step")
    learns, memorizes = report["bigger_machine"]["checks"][:2]
    assert (learns["check"], learns["ok"]) == ("it learns", False)
    assert learns["detail"] == "30 of 30 training losses were NaN or inf"
    assert memorizes["ok"] is None
    assert memorizes["detail"] == "not measured (every example it would fit holds NaN or inf)"


def test_the_rules_set_aside_on_a_nonfinite_run_are_rules():
    assert set(READS_TRAINED_ACCURACY) <= set(VERDICTS)
    assert VERDICT not in VERDICTS  # no fitted threshold: the doctor's own finding, before every fitted rule


def tiny_loop(doctor_kwargs=None, *, forward=None, skip_step=False, steps=30):
    """A user's own loop under the doctor's three lines; `skip_step` drops each update, as a GradScaler does on inf."""
    torch.manual_seed(0)
    x, y = torch.randn(256, 8), torch.randint(0, 2, (256,))
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)] * 4
    doctor = Doctor(net, optimizer, loss_fn, batches[:steps], memorize_steps=20, **(doctor_kwargs or {}))
    for xb, yb in doctor:
        out = net(xb) if forward is None else forward(net, xb)
        loss = loss_fn(out, yb)
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        if skip_step:
            optimizer.zero_grad()
        optimizer.step()
    return doctor, net


def test_the_doctors_second_look_leaves_the_loop_as_it_was():
    # The loss is inf at step 0 (a log of 0 in the loop), so the doctor runs the model's forward again on the
    # step's inputs: it must not count as an evaluation forward in training mode, nor move BatchNorm's statistics.
    seen = {}

    def forward(net, x):
        out = net(x)
        if "mean" not in seen:
            seen["mean"] = net[1].running_mean.clone()
        return (out.softmax(1) * 0).log()

    doctor, net = tiny_loop(forward=forward, steps=1)
    assert doctor.nonfinite.origin.what == "loss"
    assert torch.equal(net[1].running_mean, seen["mean"])
    assert doctor.instruments.forwards["eval_in_train"] == 0 and doctor.instruments.forwards["train"] == 1


def test_nonfinite_gradients_with_a_finite_loss_are_no_verdict():
    # A step skipped on inf gradients (what a GradScaler does) leaves the weights and the loss finite: not a fault.
    def forward(net, x):
        out = net(x)
        return out + (out * 0).sqrt()  # a NaN gradient, a finite loss

    doctor, _ = tiny_loop(forward=forward, skip_step=True)
    report = doctor.report()
    assert doctor.nonfinite.gradients is not None and doctor.nonfinite.gradients[0] == 0
    assert report.verdict != VERDICT and report.measurements["nonfinite_losses"] == 0
    assert math.isfinite(report.measurements["train_loss_curve"][-1])


# ----- the doctor cannot judge the run: exit status 2, one line naming what is supported ----------------------
SAY = (
    "say where its inputs and targets are, Doctor(..., inputs=..., targets=...) with an int (a tuple item), a str (a"
    " dict key or attribute), a tuple of them (several inputs) or a function of the batch"
)
NO_PARAMETERS = (
    "the model has no parameters to train: Net registers no nn.Parameter (layers kept in a plain list or dict rather"
    " than nn.ModuleList or nn.ModuleDict, or tensors not wrapped in nn.Parameter, are not registered)"
)
REFUSED = {
    "a dict batch without a targets key": (
        """
        def batches():
            return [{"x": X[i : i + 32], "classes": Y[i : i + 32]} for i in range(0, 256, 32)]
        """,
        "a training batch is a dict (keys 'x', 'classes') with no targets key of 'labels', 'label', 'targets',"
        f" 'target', 'y': {SAY}",
    ),
    "an (x, y, index) batch": (
        """
        def batches():
            return [(X[i : i + 32], Y[i : i + 32], torch.arange(i, i + 32)) for i in range(0, 256, 32)]
        """,
        "a training batch is a tuple of 3 (Tensor, Tensor, Tensor) and the model's forward takes 1 input (input):"
        f" {SAY}",
    ),
    "a model taking two tensors, batches of one": (
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(8, 2)

            def forward(self, x, mask):
                return self.layer(x * mask)

        def model():
            return Net()
        """,
        f"the model's forward takes 2 inputs (x, mask) and the inputs of a batch are one tensor: {SAY}",
    ),
    "a dict validation batch without a targets key": (
        """
        def validation():
            return [{"x": X, "classes": Y}]
        """,
        "a validation batch is a dict (keys 'x', 'classes') with no targets key of 'labels', 'label', 'targets',"
        f" 'target', 'y': {SAY}",
    ),
    "TARGETS naming a key the batches lack": (
        """
        TARGETS = "labels"
        def batches():
            return [{"x": X[i : i + 32], "y": Y[i : i + 32]} for i in range(0, 256, 32)]
        """,
        f"a training batch is a dict (keys 'x', 'y'), without the key 'labels' said to hold the targets: {SAY}",
    ),
    "a model returning a tuple": (
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(8, 2)

            def forward(self, x):
                return self.layer(x), x

        def model():
            return Net()
        """,
        "the model returned a tuple of 2 (Tensor, Tensor): the doctor reads one output tensor; say which,"
        " Doctor(..., output=...) with an int, a str (a key or attribute) or a function of the output",
    ),
    "targets of two per example for one output, the loss broadcasting them": (
        """
        loss = nn.MSELoss()

        def batches():
            return [(X[i : i + 32], X[i : i + 32, :2]) for i in range(0, 256, 32)]

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(8, 1)

            def forward(self, x):
                return self.layer(x)

        def model():
            return Net()
        """,
        "what the loss received makes no task either: targets (32, 2) (torch.float32) and model output (32, 1) make no"
        " task the doctor covers: class indices with (batch, C) outputs, class indices per position (batch, time)"
        " with (batch, time, V) outputs, or targets of the output's shape (one-hot, binary, multi-label, regression)",
    ),
    "no batch at all": (
        """
        def batches():
            return []
        """,
        "the batches are empty: batches() gave no batch to train on",
    ),
    "train() that returns nothing": (
        """
        def train(Doctor):
            net = model()
            doctor = Doctor(net, optimizer(net.parameters()), loss)
        """,
        "the recipe's train(Doctor) returned None, not the doctor it built: end it with `return doctor`",
    ),
    # Before: a crash in the doctor's own frames (a gather with index -1), blamed on the recipe (exit status 3).
    "a class label of -1 the loss does not ignore": (
        "Y[::7] = -1",
        "class label -1 in the first batch's targets is outside the model's 2 classes (0 to 1), and the loss does not"
        " ignore it: fix the labels (or the output layer's width), or, if -1 marks examples to leave out, give the"
        " loss ignore_index=-1, e.g. nn.CrossEntropyLoss(ignore_index=-1)",
    ),
    "a class label past the output's classes": (
        "Y[3] = 2",
        "class label 2 in the first batch's targets is outside the model's 2 classes (0 to 1), and the loss does not"
        " ignore it: fix the labels (or the output layer's width), or, if 2 marks examples to leave out, give the"
        " loss ignore_index=2, e.g. nn.CrossEntropyLoss(ignore_index=2)",
    ),
    "a loss ignoring another label than the batches hold": (
        """
        Y[::7] = -1
        loss = nn.CrossEntropyLoss(ignore_index=255)
        """,
        "class label -1 in the first batch's targets is outside the model's 2 classes (0 to 1), and the loss does not"
        " ignore it: fix the labels (or the output layer's width), or, if -1 marks examples to leave out, give the"
        " loss ignore_index=-1, e.g. nn.CrossEntropyLoss(ignore_index=-1)",
    ),
    "a loss function (no ignore_index attribute) that raises on -1": (
        """
        Y[::7] = -1
        def loss(out, y):
            return nn.functional.cross_entropy(out, y)
        """,
        "class label -1 in the first batch's targets is outside the model's 2 classes (0 to 1), and the loss does not"
        " ignore it: fix the labels (or the output layer's width), or, if -1 marks examples to leave out, give the"
        " loss ignore_index=-1, e.g. nn.CrossEntropyLoss(ignore_index=-1)",
    ),
    # Before: StopIteration from the doctor's next(model.parameters()), blamed on the recipe (exit status 3).
    "a model with no parameters, its optimizer given another tensor": (
        """
        class Net(nn.Module):
            def forward(self, x):
                return torch.zeros(len(x), 2, requires_grad=True)

        def model():
            return Net()

        def optimizer(params):
            return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        """,
        NO_PARAMETERS,
    ),
    "a model with no parameters (layers in a plain list)": (
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = [nn.Linear(8, 2)]

            def forward(self, x):
                return self.layers[0](x)

        def model():
            return Net()
        """,
        NO_PARAMETERS,
    ),
    "a model with no parameters in train()": (
        """
        class Net(nn.Module):
            def forward(self, x):
                return torch.zeros(len(x), 2, requires_grad=True)

        def train(Doctor):
            net = Net()
            doctor = Doctor(net, torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), loss, batches())
            return doctor
        """,
        NO_PARAMETERS,
    ),
    "STEPS = 0 in the recipe": (
        "STEPS = 0",
        "the recipe's STEPS must be a whole number of training steps above 0, not 0: set STEPS to the probe"
        " loop's length, e.g. STEPS = 300",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_run_the_doctor_cannot_judge_is_refused_in_one_line(tmp_path, capsys, case):
    extra, message = REFUSED[case]
    status, out, err = doctor_cli(capsys, write(tmp_path, f"refused {case}", extra))
    assert (status, out, err) == (2, "", f"error: {message}\n")


def test_a_missing_recipe_or_a_missing_model_is_refused_in_one_line(tmp_path, capsys):
    missing = tmp_path / "nowhere.py"
    assert doctor_cli(capsys, missing) == (2, "", f"error: no recipe file at {missing}\n")
    no_model = write(tmp_path, "no_model", base=BASE.replace("def model():", "def not_the_model():"))
    expected = "error: recipe no_model.py lacks model (see `python -m doctor --help`)\n"
    assert doctor_cli(capsys, no_model) == (2, "", expected)


def test_the_help_text_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for code in (
        "0  healthy",
        "1  a fault was named",
        "2  the doctor cannot judge",
        "3  the recipe's own code",
        "130  Ctrl-C with nothing to report",
    ):
        assert code in text
    for option in ("--max-steps N", "--max-seconds S", "--steps N"):
        assert option in text


# ----- options the doctor cannot use: exit status 2 in one line, before anything runs -------------------------
# The recipe's batches() raises: had the run started, the exit status would be 3. The folder `missing` does not exist.
NOT_RUN = """
def batches():
    raise RuntimeError("the run started")
"""
STEPS_LINE = "must be a whole number of training steps above 0, not {!r}"
OPTIONS = {
    # Before: --steps 0 was ignored (the default ran), --steps -5 ran no step and advised wrapping the loader.
    "--steps 0": (
        ["--steps", "0"],
        "--steps " + STEPS_LINE.format("0") + " (leave it out for the recipe's STEPS, or 300)",
    ),
    "--steps -5": (
        ["--steps", "-5"],
        "--steps " + STEPS_LINE.format("-5") + " (leave it out for the recipe's STEPS, or 300)",
    ),
    "--steps 2.5": (
        ["--steps", "2.5"],
        "--steps " + STEPS_LINE.format("2.5") + " (leave it out for the recipe's STEPS, or 300)",
    ),
    "--max-steps 0": (["--max-steps", "0"], "--max-steps " + STEPS_LINE.format("0")),
    "--max-steps -1": (["--max-steps", "-1"], "--max-steps " + STEPS_LINE.format("-1")),
    "--max-steps ten": (["--max-steps", "ten"], "--max-steps " + STEPS_LINE.format("ten")),
    "--max-seconds 0": (["--max-seconds", "0"], "--max-seconds must be a number of seconds above 0, not '0'"),
    "--max-seconds -3": (["--max-seconds", "-3"], "--max-seconds must be a number of seconds above 0, not '-3'"),
    "--max-seconds nan": (["--max-seconds", "nan"], "--max-seconds must be a number of seconds above 0, not 'nan'"),
    "--max-seconds inf": (["--max-seconds", "inf"], "--max-seconds must be a number of seconds above 0, not 'inf'"),
    "--max-seconds 1m": (["--max-seconds", "1m"], "--max-seconds must be a number of seconds above 0, not '1m'"),
    # Before: the run ran, then writing the JSON raised and the exit status was 1, read as "a fault".
    "--json into a missing folder": (
        ["--json", "{tmp}/missing/report.json"],
        "--json {tmp}/missing/report.json: its folder {tmp}/missing does not exist; create it, or name another file",
    ),
    "--plot into a missing folder": (
        ["--plot", "{tmp}/missing/report.png"],
        "--plot {tmp}/missing/report.png: its folder {tmp}/missing does not exist; create it, or name another file",
    ),
    # Before: "its folder {tmp}/not_run.py does not exist", of a file that exists.
    "--json inside a file's path": (
        ["--json", "{tmp}/not_run.py/out/report.json"],
        "--json {tmp}/not_run.py/out/report.json: {tmp}/not_run.py is a file, not a folder; name a file in a folder",
    ),
    "--json naming a folder": (
        ["--json", "{tmp}"],
        "--json {tmp} is a folder: name a file in it (e.g. {tmp}/report)",
    ),
}


@pytest.mark.parametrize("case", OPTIONS)
def test_an_option_the_doctor_cannot_use_is_refused_in_one_line_before_the_run(tmp_path, capsys, case):
    args, message = OPTIONS[case]
    path = write(tmp_path, "not_run", NOT_RUN)
    args = [a.format(tmp=tmp_path) for a in args]
    assert doctor_cli(capsys, path, *args) == (2, "", f"error: {message.format(tmp=tmp_path)}\n")


def test_steps_for_a_recipe_that_runs_its_own_loop_is_refused_not_ignored(tmp_path, capsys):
    own_loop = """
    def train(Doctor):
        raise RuntimeError("the run started")
    """
    path = write(tmp_path, "own_loop", own_loop)
    expected = (
        "error: steps (--steps) is the probe loop's length, and own_loop.py runs its own train(): cut its loop with"
        " max_steps (--max-steps N), or run the probe (--probe --steps N)\n"
    )
    assert doctor_cli(capsys, path, "--steps", "10") == (2, "", expected)


# ----- the user's own code raised: exit status 3, with the user's traceback -----------------------------------
RAISED = {
    "an exception in forward": (
        one_layer('raise RuntimeError("the forward broke")'),
        ["in forward", 'raise RuntimeError("the forward broke")', "RuntimeError: the forward broke"],
    ),
    "an AttributeError in forward": (
        one_layer("return self.lyr(x)"),
        ["in forward", "return self.lyr(x)", "AttributeError: 'Net' object has no attribute 'lyr'"],
    ),
    "an exception in the loss": (
        """
        def loss(out, y):
            raise ValueError("the loss broke")
        """,
        ["in loss", "ValueError: the loss broke"],
    ),
    "an exception in the data code": (
        """
        def batches():
            return [(X[i : i + 32], Y[i : i + 32]) for i in range(0, 256, 32)][100]
        """,
        ["in batches", "IndexError: list index out of range"],
    ),
    "a KeyError in train()": (
        """
        def train(Doctor):
            return {}["doctor"]
        """,
        ["in train", "KeyError: 'doctor'"],
    ),
}


@pytest.mark.parametrize("case", RAISED)
def test_the_users_own_exception_shows_its_traceback(tmp_path, capsys, case):
    extra, shown = RAISED[case]
    path = write(tmp_path, f"raised {case}", extra)
    status, out, err = doctor_cli(capsys, path)
    assert status == 3 and out == ""
    lines = err.splitlines()
    assert lines[0] == "the recipe's own code raised an exception; the doctor judged nothing (exit status 3):"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[2].startswith(f'  File "{path}"'), err  # from the user's own frame, not the doctor's
    assert all(text in err for text in shown), err
    assert f"{ROOT / 'doctor'}" not in err, err


def test_targets_no_output_fits_are_left_to_the_loss_whose_own_error_passes_through(tmp_path, capsys):
    # Before: refused at the first batch, from forward()'s output. The task is read from what the loss receives
    # (a loop may reshape or decode first); a loss that cannot take them raises, and its error is the run's.
    regression = """
        def batches():
            return [(X[i : i + 32], X[i : i + 32, 0]) for i in range(0, 256, 32)]
        """
    status, out, err = doctor_cli(capsys, write(tmp_path, "float targets for two classes", regression))
    assert status == 3 and out == "" and err.startswith("the recipe's own code raised an exception")
    assert "cross_entropy" in err and "Float" in err, err


def test_a_syntax_error_in_the_recipe_exits_3_with_its_file_line_and_caret(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("def model(:\n    pass\n")
    status, out, err = doctor_cli(capsys, path)
    assert status == 3 and out == ""
    assert err.splitlines()[1:] == [
        f'  File "{path}", line 1',
        "    def model(:",
        "              ^",
        "SyntaxError: invalid syntax",
    ]


@pytest.mark.slow
def test_an_attribute_error_in_forward_exits_3_as_a_real_process(tmp_path):
    # Before: a one-line refusal with exit status 2, as if the recipe lacked model().
    path = write(tmp_path, "typo", one_layer("return self.lyr(x)"))
    result = subprocess.run([sys.executable, "-m", "doctor", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "Traceback (most recent call last):" in result.stderr and "return self.lyr(x)" in result.stderr
    assert result.stderr.rstrip().endswith("AttributeError: 'Net' object has no attribute 'lyr'")


# ----- a healthy run exits 0 (a named fault exits 1: tests/test_doctor.py runs one end to end) ------------------
def test_a_healthy_run_exits_0(tmp_path, capsys):
    healthy = """
    STEPS = 50
    X = torch.randn(512, 8)
    Y = (X[:, 0] + X[:, 1] > 0).long()

    def model():
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))

    def batches():
        return [(X[i : i + 32], Y[i : i + 32]) for i in range(0, 384, 32)]

    def optimizer(params):
        return torch.optim.Adam(params, lr=1e-2)

    def validation():
        return [(X[384:], Y[384:])]
    """
    status, out, err = doctor_cli(capsys, write(tmp_path, "healthy", healthy))
    assert status == 0, out + err
    assert out.startswith("verdict: healthy") and "(from 50 training steps)" in out.splitlines()[0]


# ----- the probe loop calls the recipe's loss as the doctor reads the task ------------------------------------------
LANGUAGE_MODEL = """
import torch
from torch import nn

V, T = 16, 8
SEQUENCE = (torch.arange(4096) * 3) % V  # a text whose next token is always known


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(V, 32), nn.GRU(32, 32, batch_first=True), nn.Linear(32, V)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])  # (batch, time, V)


def model():
    return TinyLM()


def batches():
    generator = torch.Generator().manual_seed(0)
    while True:
        starts = torch.randint(0, len(SEQUENCE) - T - 1, (8,), generator=generator)
        yield (
            torch.stack([SEQUENCE[s : s + T] for s in starts]),
            torch.stack([SEQUENCE[s + 1 : s + T + 1] for s in starts]),
        )


loss = nn.CrossEntropyLoss()  # takes (N, V) rows or (batch, V, time): not (batch, time, V)


def optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


STEPS = 100
"""


def test_a_language_model_recipe_with_a_loss_module_is_judged_by_the_probe(tmp_path, capsys):
    # Before: exit 3, "Expected target size [8, 16], got [8, 8]" from the doctor's own loop, blamed on the recipe.
    status, out, err = doctor_cli(capsys, write(tmp_path, "tiny_lm", base=LANGUAGE_MODEL))
    assert status == 0 and out.startswith("verdict: healthy"), out + err
    assert "the loss: cross_entropy on (64, 16) vs (64,)" in out
