"""The doctor's step and time budgets, and Ctrl-C: a run cut short still gets the report of its steps so far.

`Doctor(..., max_steps=N, max_seconds=S)` and `python -m doctor --max-steps N --max-seconds S`: the watch yields no
batch once either budget is spent, in a user's own loop, in a recipe's train(Doctor) and in the probe loop, and the
report's first line says where the run was cut. Ctrl-C (KeyboardInterrupt) during a recipe's run ends it with the
report of the steps so far, its exit status the verdict's; before the first step, one line and exit status 130.
"""

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_doctor_bad_input import BASE as BAD_INPUT_BASE
from test_doctor_bad_input import doctor_cli
from test_doctor_bad_input import write as write_recipe
from torch import nn

from doctor import Doctor
from doctor.probe_loop import probe
from doctor.refusals import Interrupted

# The recipe of tests/test_doctor_bad_input.py without its validation(): a run of 30 probe steps.
BASE = BAD_INPUT_BASE[: BAD_INPUT_BASE.index("\n\ndef validation():")] + "\n"

# A recipe's own loop: ten epochs of eight batches, unless a budget cuts it.
OWN_LOOP = """
def train(Doctor):
    net = model()
    opt = optimizer(net.parameters())
    doctor = Doctor(net, opt, loss)
    for epoch in range(10):
        for x, y in doctor.watch(batches()):
            out = loss(net(x), y)
            opt.zero_grad()
            out.backward()
            doctor.after_backward(out)
            opt.step()
    return doctor
"""


pytestmark = pytest.mark.usefixtures("one_thread")


def write(tmp_path, name: str, extra: str = ""):
    """The recipe BASE (30 probe steps, no validation) + `extra` as tmp_path/NAME.py."""
    return write_recipe(tmp_path, name, extra, base=BASE)


def own_loop(budgets: dict, batches=None, epochs: int = 3) -> Doctor:
    torch.manual_seed(0)
    x, y = torch.randn(256, 8), torch.randint(0, 2, (256,))
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(net, optimizer, loss_fn, memorize_steps=20, **budgets)
    for _ in range(epochs):
        for xb, yb in doctor.watch(
            batches() if batches else [(x[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)]
        ):
            loss = loss_fn(net(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    return doctor


# ----- the budgets on Doctor: a user's own loop over several epochs ------------------------------------------------
def test_a_step_budget_cuts_a_users_loop_across_epochs_and_the_report_says_so():
    report = own_loop({"max_steps": 11}).report()
    assert report.steps == 11  # three epochs of 8 would be 24
    assert report.stopped == "cut at the step budget, max_steps=11"
    assert str(report).splitlines()[0].endswith("(from 11 training steps; cut at the step budget, max_steps=11)")
    assert report.to_dict()["stopped"] == "cut at the step budget, max_steps=11"
    assert own_loop({}).report().stopped is None and own_loop({}).report().steps == 24


def test_a_time_budget_cuts_a_slow_loop():
    def slow():
        for _ in range(8):
            time.sleep(0.05)
            yield torch.randn(32, 8), torch.randint(0, 2, (32,))

    report = own_loop({"max_seconds": 0.3}, batches=slow).report()
    assert 0 < report.steps < 24  # 24 batches of 0.05 s would take 1.2 s
    assert report.stopped == "cut at the time budget, max_seconds=0.3"


BAD_BUDGETS = {
    "max_steps=0": (
        {"max_steps": 0},
        "max_steps must be a whole number of training steps above 0 (None: no budget), not 0",
    ),
    "max_steps=-5": (
        {"max_steps": -5},
        "max_steps must be a whole number of training steps above 0 (None: no budget), not -5",
    ),
    "max_steps=2.5": (
        {"max_steps": 2.5},
        "max_steps must be a whole number of training steps above 0 (None: no budget), not 2.5",
    ),
    "max_steps=True": (
        {"max_steps": True},
        "max_steps must be a whole number of training steps above 0 (None: no budget), not True",
    ),
    "max_steps='10'": (
        {"max_steps": "10"},
        "max_steps must be a whole number of training steps above 0 (None: no budget), not '10'",
    ),
    "max_seconds=0": ({"max_seconds": 0}, "max_seconds must be a number of seconds above 0 (None: no budget), not 0"),
    "max_seconds=-1.5": (
        {"max_seconds": -1.5},
        "max_seconds must be a number of seconds above 0 (None: no budget), not -1.5",
    ),
    "max_seconds=nan": (
        {"max_seconds": math.nan},
        "max_seconds must be a number of seconds above 0 (None: no budget), not nan",
    ),
    "max_seconds=inf": (
        {"max_seconds": math.inf},
        "max_seconds must be a number of seconds above 0 (None: no budget), not inf",
    ),
}


@pytest.mark.parametrize("case", BAD_BUDGETS)
def test_a_budget_that_is_not_a_number_above_0_is_refused_naming_it(case):
    budgets, message = BAD_BUDGETS[case]
    net = nn.Linear(8, 2)
    with pytest.raises(ValueError) as raised:
        Doctor(net, torch.optim.SGD(net.parameters(), lr=0.1), nn.CrossEntropyLoss(), **budgets)
    assert str(raised.value) == message


# ----- the budgets on the command line: the probe loop and a recipe's own train() ---------------------------------
BUDGETED = {
    "the probe loop, --max-steps": (
        "",
        ["--max-steps", "12"],
        "(from 12 training steps; cut at the step budget, max_steps=12)",
    ),
    "train(), --max-steps": (
        OWN_LOOP,
        ["--max-steps", "12"],
        "(from 12 training steps; cut at the step budget, max_steps=12)",
    ),
    "the probe loop, a --max-steps above its steps": ("", ["--max-steps", "100"], "(from 30 training steps)"),
}


@pytest.mark.parametrize("case", BUDGETED)
def test_the_command_lines_step_budget_cuts_the_loop_that_runs(tmp_path, capsys, case):
    extra, args, headline = BUDGETED[case]
    status, out, err = doctor_cli(capsys, write(tmp_path, "budgeted", extra), *args, "--json", tmp_path / "r.json")
    first = out.splitlines()[0]
    assert first.endswith(headline), out + err
    report = json.loads((tmp_path / "r.json").read_text())
    assert status == (0 if report["verdict"] == "healthy" else 1)
    assert report["stopped"] == (None if "cut" not in headline else "cut at the step budget, max_steps=12")


@pytest.mark.slow
@pytest.mark.parametrize("steps", [10, 50, 200])
def test_a_healthy_recipe_cut_at_any_step_count_is_never_called_a_failure(capsys, steps):
    # Before: `--max-steps 10` printed unexplained_failure (cut at the step budget) and exited 1. A cut run is judged
    # on its outcome only once its loss had flattened; before that the outcome is too early to judge.
    status, out, err = doctor_cli(capsys, ROOT / "examples" / "healthy_cnn.py", "--max-steps", steps)
    assert status == 0 and out.startswith("verdict: healthy"), out + err
    assert f"(from {steps} training steps; cut at the step budget, max_steps={steps})" in out.splitlines()[0]


def test_the_command_lines_time_budget_cuts_the_probe(tmp_path, capsys):
    slow = """
    import time
    STEPS = 100000

    def batches():
        for i in range(0, 256, 32):
            time.sleep(0.02)
            yield X[i : i + 32], Y[i : i + 32]
    """
    status, out, err = doctor_cli(capsys, write(tmp_path, "slow", slow), "--max-seconds", "0.5")
    match = re.fullmatch(
        r"verdict: .*  \(from (\d+) training steps; cut at the time budget, max_seconds=0.5\)", out.splitlines()[0]
    )
    assert match and 0 < int(match[1]) < 100, out + err
    assert status in (0, 1)


# ----- Ctrl-C: the report of the steps so far --------------------------------------------------------------------
# The recipe's batches raise KeyboardInterrupt as Ctrl-C would, after `AFTER` batches have been handed out.
CTRL_C = """
AFTER = {after}
handed = 0

def batches():
    global handed
    for i in range(0, 256, 32):
        if handed == AFTER:
            raise KeyboardInterrupt
        handed += 1
        yield X[i : i + 32], Y[i : i + 32]
"""
INTERRUPTED = {
    "the probe loop, after 12 steps": (CTRL_C.format(after=12), 12),
    "train(), after 12 steps": (CTRL_C.format(after=12) + OWN_LOOP, 12),
    "the probe loop, before the first step": (CTRL_C.format(after=0), 0),
    "train(), before the first step": (CTRL_C.format(after=0) + OWN_LOOP, 0),
    "the recipe file itself, as it loads": ("raise KeyboardInterrupt", 0),
}


def doctor_process(recipe) -> subprocess.Popen:
    """`python -m doctor RECIPE` in a process of its own that Ctrl-C (SIGINT) reaches, its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "doctor", str(recipe)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A child inherits an ignored SIGINT (pytest run as a shell's background job), and Python then never raises
        # KeyboardInterrupt, as in tests/test_sweep.py: the probe of a million steps would run on past the timeout.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("case", INTERRUPTED)
def test_ctrl_c_ends_with_the_report_of_the_steps_so_far(tmp_path, capsys, case):
    extra, steps = INTERRUPTED[case]
    status, out, err = doctor_cli(capsys, write(tmp_path, "interrupted", extra))
    if not steps:  # nothing to report: one line, the shell's status after Ctrl-C
        assert (status, out, err) == (
            130,
            "",
            "error: interrupted (Ctrl-C) before the first training step: nothing to report\n",
        )
        return
    first = out.splitlines()[0]
    assert first.endswith(f"(from {steps} training steps; interrupted (Ctrl-C) after {steps} steps)"), out + err
    assert status == (0 if first.startswith("verdict: healthy") else 1)
    assert err == ""


def test_ctrl_c_in_the_probe_api_reports_the_steps_so_far_or_raises_before_any():
    def batches(after):
        def make():
            for _ in range(after):
                yield torch.randn(32, 8), torch.randint(0, 2, (32,))
            raise KeyboardInterrupt

        return make

    def model():
        return nn.Linear(8, 2)

    def optimizer(params):
        return torch.optim.SGD(params, lr=0.1)

    report = probe(model, batches(5), nn.CrossEntropyLoss(), optimizer, steps=30)
    assert report.steps == 5 and report.stopped == "interrupted (Ctrl-C) after 5 steps"
    with pytest.raises(
        Interrupted, match=r"^interrupted \(Ctrl-C\) before the first training step: nothing to report$"
    ):
        probe(model, batches(0), nn.CrossEntropyLoss(), optimizer, steps=30)


@pytest.mark.slow
def test_sigint_to_a_running_doctor_ends_with_the_report_of_the_steps_so_far(tmp_path):
    # A probe of a million steps; the recipe says when it has trained a while (a file), and then gets Ctrl-C.
    started = tmp_path / "started"
    long = f"""
    STEPS = 1000000
    handed = 0

    def batches():
        global handed
        for i in range(0, 256, 32):
            handed += 1
            if handed == 50:
                open({str(started)!r}, "w").close()
            yield X[i : i + 32], Y[i : i + 32]
    """
    path = write(tmp_path, "long", long)
    process = doctor_process(path)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), process.stderr.read() if process.poll() is not None else "no step within 120 s"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    first = out.splitlines()[0]
    match = re.fullmatch(
        r"verdict: ([a-z_]+).*  \(from (\d+) training steps; interrupted \(Ctrl-C\) after (\d+) steps\)", first
    )
    assert match and match[2] == match[3] and int(match[2]) >= 49, out + err
    assert process.returncode == (0 if match[1] == "healthy" else 1), out + err
    assert "Traceback" not in err, err


@pytest.mark.slow
def test_ctrl_c_while_torch_is_imported_is_one_line_and_exit_status_130(tmp_path):
    # Before: 14 to 35 lines of importlib's and torch's frames, once a RecursionError blamed on the recipe (exit 3).
    path = write(tmp_path, "plain", "")
    process = doctor_process(path)
    try:
        maps, deadline = Path(f"/proc/{process.pid}/maps"), time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline and "libtorch" not in maps.read_text():
            time.sleep(0.01)  # until torch's libraries are being loaded: its import has begun, and lasts a second
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert (process.returncode, out, err) == (
        130,
        "",
        "error: interrupted (Ctrl-C) while the doctor started: nothing to report\n",
    )


# ----- the doctor's own fits cut short (the benchmarks' tests: BENCHMARK_FIT_STEPS_CAP) --------------------------
@pytest.mark.parametrize("extra", ["", OWN_LOOP], ids=["the probe loop", "train()"])
def test_fit_steps_cuts_each_fit_of_a_fresh_model_in_the_loop_that_runs(tmp_path, monkeypatch, extra):
    from doctor.recipe import load, run
    from harness import after_training

    steps = {}
    for fit in ("memorize", "fit_capacity"):
        real = getattr(after_training, fit)

        def recorded(*args, _fit=fit, _real=real, **kwargs):
            steps[_fit] = kwargs["steps"]
            return _real(*args, **kwargs)

        monkeypatch.setattr(after_training, fit, recorded)
    recipe = load(write(tmp_path, "fits", extra))
    run(recipe, max_steps=12, fit_steps=4)
    assert steps == {"memorize": 4, "fit_capacity": 4}
    run(recipe, max_steps=12)  # the doctor's own lengths otherwise
    assert steps["memorize"] == 300 and steps["fit_capacity"] > 4


def test_fit_steps_that_are_not_a_whole_number_above_0_are_refused_naming_it(tmp_path):
    from doctor.recipe import load, run

    with pytest.raises(ValueError, match="fit_steps"):
        run(load(write(tmp_path, "fits")), fit_steps=0)
