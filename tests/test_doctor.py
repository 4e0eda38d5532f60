"""The doctor on a model family the grid does not use (a small CNN on digits' 8x8 images), on the CPU."""

import json
import math
import re
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

sys.path.insert(0, str(ROOT / "examples"))
from digits_cnn import TRAIN, VAL, SmallCNN

from analysis.rules import load_thresholds
from doctor import CannotJudge, Doctor, UnsupportedTask, probe
from harness.instruments.budget import SHARE

STEPS = 200

# Each planted fault as a change to the CNN recipe: model, data, optimizer or the loop itself.
FAULTS = {
    "healthy": {},
    "lr_too_high": {"lr": 0.1},
    "lr_too_low": {"lr": 1e-6},
    "no_zero_grad": {"zero_grad": False},
    "unscaled_inputs": {"scale": 255.0},
    "dead_relu": {"bias": -3.0},
    "model_too_small": {"channels": 2, "hidden": 4},  # a bottleneck of 0.4 units per class, as planted
    "shuffled_labels": {"shuffle_labels": True},
    "frozen_params": {"frozen": True},
    "starved_loader": {"latency": 3.0},  # each batch takes 3x the step that consumes it: a busy machine slows both
}


def cnn_factory(channels=16, hidden=64, bias=None, frozen=False, batchnorm=False):
    def make():
        net = SmallCNN(channels=channels, hidden=hidden, batchnorm=batchnorm)  # BatchNorm hides input scale and biases
        if bias is not None:
            for layer in net.modules():
                if isinstance(layer, nn.Conv2d | nn.Linear) and layer is not net.head[-1]:
                    nn.init.constant_(layer.bias, bias)
        if frozen:
            net.features.requires_grad_(False)
            net.head[1].requires_grad_(False)
        return net

    return make


class SqrtGate(nn.Module):
    """A model times (1 + sqrt(gate)), the gate starting at 0: the derivative of sqrt at 0 is inf, the loss finite."""

    def __init__(self, net):
        super().__init__()
        self.net, self.gate = net, nn.Parameter(torch.zeros(1))

    def forward(self, x):
        out = self.net(x)
        return out * (1 + torch.sqrt(self.gate))


def training_batches(scale=1.0, shuffle_labels=False, latency=0.0, order=None):
    images, labels = TRAIN.tensors
    if shuffle_labels:
        labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))]
    images = images * scale
    if order == "class_sorted":  # shuffle=False over a dataset stored class by class
        order = torch.argsort(labels, stable=True)
    elif order == "fixed":  # shuffle=False over a dataset shuffled once
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(2))
    else:
        order = torch.randperm(len(labels))  # whole-batch indexing: a DataLoader over tiny tensors waits per item
    step_s = None  # how long the consumer took over the last batch, from handing it over to asking again
    for start in range(0, len(labels) - 63, 64):
        if latency and step_s is not None:
            time.sleep(latency * step_s)
        index = order[start : start + 64]
        handed = time.perf_counter()
        yield images[index], labels[index]
        step_s = time.perf_counter() - handed


def validation(scale=1.0):
    images, labels = VAL.tensors
    return [(images * scale, labels)]


def rate_schedule(optimizer, knobs: dict, steps: int):
    """The learning-rate schedule a fault's knobs ask for (a warmup, a StepLR, a cosine), or None."""
    warmup = knobs.get("warmup", 0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup)) if warmup else None
    if knobs.get("step_lr"):  # StepLR meant per epoch (step_size in epochs), stepped after every batch
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=knobs["step_lr"], gamma=0.1)
    if knobs.get("cosine"):
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    return schedule


def wrapped_run(fault: str, steps: int = STEPS, budget=SHARE):
    """A user's own loop with the doctor's three lines, the planted fault in its pieces or its loop.

    `budget`: the doctor's cost budget (harness/instruments/budget.py); None watches every step.
    """
    knobs = FAULTS[fault]
    torch.manual_seed(0)
    make = cnn_factory(**{k: knobs[k] for k in ("channels", "hidden", "bias", "frozen", "batchnorm") if k in knobs})
    if knobs.get("sqrt_at_zero"):
        make = (lambda inner: lambda: SqrtGate(inner()))(make)
    net = make()
    kind = torch.optim.AdamW if "weight_decay" in knobs else torch.optim.Adam
    optimizer = kind(net.parameters(), lr=knobs.get("lr", 1e-3), weight_decay=knobs.get("weight_decay", 0.0))
    if knobs.get("rebuilt"):
        net = make()  # the model rebuilt after its optimizer was made: the optimizer holds the first one's tensors
    schedule = rate_schedule(optimizer, knobs, steps)
    amp = knobs.get("amp", False)
    scaler = torch.amp.GradScaler("cpu", enabled=amp)
    loss_fn = nn.CrossEntropyLoss()
    data = {k: knobs[k] for k in ("scale", "shuffle_labels", "latency", "order") if k in knobs}
    # 100 memorization steps per rate instead of 300: the checklist's "it learns" is not what these tests check
    doctor = Doctor(
        net,
        optimizer,
        loss_fn,
        validation=validation(knobs.get("scale", 1.0)),
        model_factory=make,
        memorize_steps=100,
        scaler=None if knobs.get("hide_scaler") else scaler,
        budget=budget,
    )
    step, k, clip, left_in_eval = 0, knobs.get("accumulate", 1), knobs.get("clip", 0.0), knobs.get("eval_left", 0)
    while step < steps:
        if knobs.get("zero_per_epoch"):
            optimizer.zero_grad()  # accumulation done wrong: cleared once per epoch instead of after every step
        for x, y in doctor.watch(training_batches(**data)):
            if knobs.get("permute"):
                y = y[torch.randperm(len(y))]  # labels re-ordered inside the loop, apart from their images
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = loss_fn(net(x), y)
            if knobs.get("zero_grad", True) and not knobs.get("zero_per_epoch") and step % k == 0:
                optimizer.zero_grad(set_to_none=knobs.get("set_to_none", True))
            scaler.scale(loss / k).backward()  # k > 1: gradient accumulation, each batch a k-th of the step
            doctor.after_backward(loss)
            step += 1
            if step % k == 0:
                if clip:
                    if not knobs.get("clip_scaled"):
                        scaler.unscale_(optimizer)
                    nn.utils.clip_grad_norm_(net.parameters(), clip)
                scaler.step(optimizer)
                scaler.update()
                if schedule is not None:
                    schedule.step()
            if left_in_eval and step % left_in_eval == 0:
                net.eval()  # a validation that switches to eval mode and never back
                with torch.no_grad():
                    net(validation()[0][0])
            if step == steps:
                break
    return doctor.report()


# Loops of another shape, each with the verdict it must get.
LOOPS = {
    "accumulation on purpose": ({"accumulate": 4, "lr": 2e-3}, "healthy"),
    "accumulation zeroed once per epoch": ({"accumulate": 4, "lr": 2e-3, "zero_per_epoch": True}, "no_zero_grad"),
    "mixed precision, unscale_ before clipping": ({"amp": True, "clip": 1.0}, "healthy"),
    "mixed precision, clipped before unscale_": ({"amp": True, "clip": 1.0, "clip_scaled": True}, "over_clipped"),
    "mixed precision, a sqrt at 0 in the model": ({"amp": True, "sqrt_at_zero": True}, "amp_steps_skipped"),
    "clipped at a norm of 1": ({"clip": 1.0}, "healthy"),
    "a warmup of 20 steps": ({"warmup": 20}, "healthy"),
    "a warmup that never ends": ({"warmup": 100_000}, "warmup_never_ends"),
    "zero_grad(set_to_none=False)": ({"set_to_none": False}, "healthy"),
    "BatchNorm, validated in the loop and switched back": ({"batchnorm": True}, "healthy"),
    "shuffle=False over data shuffled once": ({"order": "fixed"}, "healthy"),
    "shuffle=False over data sorted by class": ({"order": "class_sorted"}, "unshuffled_batches"),
    "BatchNorm, left in eval mode after a validation": ({"batchnorm": True, "eval_left": 20}, "wrong_mode"),
    # The causes that hid behind model_too_small (issue 31), each with the advice its verdict must give.
    "a cosine schedule to 0 over the run": ({"cosine": True}, "healthy"),
    "StepLR(step_size=30, gamma=0.1) stepped per batch": ({"step_lr": 30}, "rate_decayed_early"),
    "AdamW with weight_decay=50": ({"weight_decay": 50.0}, "weight_decay_dominates"),
    "AdamW with weight_decay=0.01": ({"weight_decay": 0.01}, "healthy"),
    "the model rebuilt after its optimizer was made": ({"rebuilt": True}, "params_not_updated"),
    "labels permuted inside the loop": ({"permute": True}, "targets_changed_in_loop"),
}
# What the next step of each new cause must tell the user to change (not "more capacity").
ADVICE = {
    "rate_decayed_early": "scheduler.step()",
    "weight_decay_dominates": "lower weight_decay",
    "params_not_updated": "build the optimizer from the model you train",
    "targets_changed_in_loop": "what the loop does to the targets",
}


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS)
def test_the_doctor_judges_loops_of_every_standard_shape(loop, monkeypatch):
    knobs, verdict = LOOPS[loop]
    monkeypatch.setitem(FAULTS, loop, knobs)
    report = wrapped_run(loop, steps=4 * STEPS if "accumulate" in knobs else STEPS)
    assert report.verdict == verdict, str(report)
    if "accumulate" in knobs:  # read from the loop, not from the loss (which the user divides by 4)
        # Every cycle watched (no cost budget): cleared once per epoch (20 optimizer steps), the first step of each
        # epoch carries nothing. (Under the budget the share is read on a sample of the cycles: the verdict above.)
        carried = wrapped_run(loop, steps=4 * STEPS, budget=None).features["grad_carried_share"]
        assert carried == 0.0 if verdict == "healthy" else 0.75 < carried < 1.0
    if knobs.get("amp") and verdict != "amp_steps_skipped":
        assert report.measurements["amp_scale_last"] == 65536.0 and report.measurements["amp_skipped_share"] == 0.0
    if verdict in ADVICE:  # the verdict's advice; later findings can follow from it (a model that never moved
        # fits nothing, so model_too_small may follow) and the report says to fix the first and run again
        assert ADVICE[verdict] in report.findings[0].next_step and "capacity" not in report.findings[0].next_step
    if verdict == "amp_steps_skipped":  # every step skipped: the scale halved 200 times, to a float32 denormal
        assert report.measurements["amp_skipped_share"] == 1.0 and report.measurements["amp_scale_min"] < 1e-30


def test_a_grad_scaler_the_doctor_was_not_given_is_named_not_misread(monkeypatch):
    # Read as they are, the scaled gradients would be 65536 times too large and every step clipped to 2^-16.
    monkeypatch.setitem(FAULTS, "scaler not given", {"amp": True, "hide_scaler": True})
    with pytest.raises(CannotJudge, match=r"divided by exactly 2\^16.*Doctor\(\.\.\., scaler=scaler\)"):
        wrapped_run("scaler not given", steps=60)


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
def test_the_doctor_names_each_planted_fault_on_a_cnn(fault):
    from analysis.rules import VERDICTS

    report = wrapped_run(fault)
    if fault in VERDICTS and VERDICTS[fault].needs_harm:
        # A check that needs harm names its fault among the failing findings when the run paid for it (a model
        # too small whose loss is still falling is still_improving first), else as a warning under healthy (a
        # CNN with BatchNorm overcomes inputs 255x too large).
        warned = report.verdict == "healthy" and fault in [f.verdict for f in report.warnings]
        assert fault in [f.verdict for f in report.failing] or warned, str(report)
    else:
        assert report.verdict == fault, str(report)
    assert report.steps == STEPS
    assert [c.check for c in report.checklist.checks] == [
        "it learns",
        "it memorizes a few examples",
        "no fault named",
        "the loader keeps up",
        "the accelerator is busy",
        "memory is what runs out",
    ]
    if report.verdict != "healthy":
        assert report.checklist.conclusion.startswith("no: ") and not report.checklist.helps


@pytest.mark.slow
def test_wrapped_loop_and_probe_agree_on_the_same_run():
    knobs = FAULTS["lr_too_high"]
    make = cnn_factory()
    probed = probe(
        make,
        lambda: training_batches(),
        nn.CrossEntropyLoss(),
        lambda params: torch.optim.Adam(params, lr=knobs["lr"]),
        steps=STEPS,
        validation=validation(),
    )
    wrapped = wrapped_run("lr_too_high")
    assert probed.verdict == wrapped.verdict == "lr_too_high"
    assert [f.verdict for f in probed.findings][:1] == [f.verdict for f in wrapped.findings][:1]


class Indexed(Dataset):
    def __len__(self):
        return len(TRAIN)

    def __getitem__(self, index):
        return TRAIN[index]


@pytest.mark.slow
def test_a_dataloader_with_workers_and_a_batchnorm_cnn_work():
    report = probe(
        lambda: SmallCNN(batchnorm=True),
        lambda: DataLoader(Indexed(), batch_size=64, shuffle=True, num_workers=2, drop_last=True),
        nn.CrossEntropyLoss(),
        lambda params: torch.optim.Adam(params, lr=1e-3),
        steps=100,
        validation=validation(),
    )
    # The workers start again every epoch (20 batches here), and how long that takes depends on the machine's
    # load: the wait is measured, not known. Every other rule is quiet, and the loader's rule fires exactly when
    # the measured wait per second of compute is over its threshold at this budget.
    starved = report.features["data_wait_ratio"] > load_thresholds(report.steps)["starved_loader"]
    assert [f.verdict for f in report.findings] == (["starved_loader"] if starved else ["healthy"])
    assert report.steps == 100 and 0.0 < report.measurements["data_wait_share"] < 1.0


def test_unsupported_tasks_are_refused_clearly():
    regression = TensorDataset(torch.randn(32, 4), torch.randn(32, 3))  # three targets, one output
    with pytest.raises(UnsupportedTask, match="make no task the doctor covers"):
        probe(
            lambda: nn.Linear(4, 1),
            lambda: DataLoader(regression, batch_size=8),
            nn.MSELoss(),
            lambda p: torch.optim.SGD(p, lr=0.1),
            steps=5,
        )

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(4, 8, batch_first=True)

        def forward(self, x):
            return self.gru(x)[0]

    # A (batch, time, 8) output for one label per example: read from the loss's inputs at the first step, where
    # cross_entropy itself refuses them (the loop's own error, unchanged).
    tokens = TensorDataset(torch.randn(16, 5, 4), torch.randint(0, 8, (16,)))
    with pytest.raises(RuntimeError, match="Expected target size"):
        probe(
            Sequence,
            lambda: DataLoader(tokens, batch_size=4),
            nn.CrossEntropyLoss(),
            lambda p: torch.optim.SGD(p, lr=0.1),
            steps=5,
        )


def doctor_on_example(name: str, out) -> subprocess.CompletedProcess:
    """`python -m doctor examples/NAME --json OUT`, from the repository's root."""
    command = [sys.executable, "-m", "doctor", f"examples/{name}", "--json", str(out)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_command_line_runs_an_example_end_to_end(tmp_path):
    out = tmp_path / "report.json"
    result = doctor_on_example("cnn_no_zero_grad.py", out)
    assert result.returncode == 1, result.stderr  # a fault was named
    assert result.stdout.startswith("verdict: no_zero_grad")
    assert "is a bigger machine the answer?" in result.stdout and "=> no: fix no_zero_grad first" in result.stdout
    document = json.loads(out.read_text())
    assert document["verdict"] == "no_zero_grad" and document["findings"][0]["margin"] > 0.4  # a share over ~0.48
    # Read from hooks; the fresh gradient the grid compares .grad with is not recomputed (it costs a pass per census).
    assert document["features"]["grad_carried_share"] == 1.0 and document["features"]["accumulation_ratio"] is None
    # The loop's own mistake points at the recipe's loop: train(), a function of many lines, by its range.
    (where,) = document["places"]["no_zero_grad"]
    assert re.fullmatch(r"cnn_no_zero_grad\.py:\d+-\d+: def train\(Doctor\):", where), where
    assert f"     where: {where}" in result.stdout


@pytest.mark.slow
def test_a_run_with_warnings_only_is_healthy_and_exits_0(tmp_path):
    """Two thirds of a wide layer's ReLUs dead at initialization, on a run that learns: a warning, exit status 0."""
    out = tmp_path / "report.json"
    result = doctor_on_example("wide_dead_start.py", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("verdict: healthy, 1 warning"), result.stdout
    document = json.loads(out.read_text())
    assert document["verdict"] == "healthy" and document["warnings"] == 1
    (warning,) = [f for f in document["findings"] if f["kind"] == "warning"]
    assert warning["verdict"] == "dead_relu" and "the run overcame it" in warning["evidence"]


def test_a_report_lists_its_warnings_under_the_verdict_and_counts_them():
    from analysis.rules import WARNING, Finding
    from doctor.machine import Checklist
    from doctor.report import Report

    findings = [
        Finding("healthy", "no failing finding (2 warnings)", "nothing to fix in what the checks measure", math.nan),
        Finding("unscaled_inputs", "inputs have an RMS of 7", "standardize", 1.4, WARNING),
        Finding("dead_relu", "60% of ReLU units never active", "check the init", 0.2, WARNING),
    ]
    report = Report(tuple(findings), Checklist((), "not needed", helps=False), 600, {}, {})
    assert report.verdict == "healthy" and report.headline == "healthy, 2 warnings"
    assert [f.verdict for f in report.warnings] == ["unscaled_inputs", "dead_relu"] and report.failing == []
    text = str(report).splitlines()
    assert text[0] == "verdict: healthy, 2 warnings  (from 600 training steps)"
    assert text.index("warnings (oddities this run did not pay for; worth a look, not the cause of a failure):") == 3
    assert "  - dead_relu: 60% of ReLU units never active  [+0.20 past its threshold]" in text
    assert [f["kind"] for f in report.to_dict()["findings"]] == ["failing", "warning", "warning"]


def test_each_verdict_points_at_the_recipe_lines_its_next_step_is_about(tmp_path):
    from analysis.rules import RULES, Finding
    from doctor.machine import Checklist
    from doctor.recipe import PARTS, places
    from doctor.report import Report

    assert {rule.verdict for rule in RULES} <= set(PARTS)
    recipe = tmp_path / "recipe.py"
    recipe.write_text(
        "from torch import nn\n"
        "loss = nn.BCEWithLogitsLoss()\n"
        "def model():\n"
        '    """The model."""\n'
        "    return nn.Sequential(\n"
        "        nn.Linear(4, 3),\n"
        "    )\n"
        "def optimizer(params):\n"
        "    return None\n"
        "def batches():\n"
        "    x = 1\n"
        "    return x\n"
    )
    verdicts = ("bce_on_single_label", "unreachable_targets", "lr_too_low", "unscaled_inputs")
    findings = [Finding(v, "", "", 1.0) for v in verdicts]
    findings.append(Finding("no_zero_grad", "", "", 1.0))  # the loop's: this recipe has no train()
    found = places(Report(tuple(findings), Checklist((), "", helps=False), 1, {}, {}), recipe)
    assert found == {
        "bce_on_single_label": ["recipe.py:2: loss = nn.BCEWithLogitsLoss()"],
        "unreachable_targets": ["recipe.py:5-7: return nn.Sequential(", "recipe.py:2: loss = nn.BCEWithLogitsLoss()"],
        "lr_too_low": ["recipe.py:9: return None"],
        "unscaled_inputs": ["recipe.py:10-12: def batches():"],  # a body of two statements: the whole function
    }


@pytest.mark.slow
def test_the_command_line_refuses_a_broken_recipe(tmp_path):
    recipe = tmp_path / "incomplete.py"
    recipe.write_text("def model():\n    return None\n")
    result = subprocess.run([sys.executable, "-m", "doctor", str(recipe)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "error: recipe incomplete.py lacks batches, loss, optimizer (see `python -m doctor --help`)"
    )


def train_over_the_doctor(doctor, net, optimizer, loss_fn) -> None:
    """A plain loop over the batches the doctor was given (iterating the doctor itself)."""
    for x, y in doctor:
        loss = loss_fn(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()


def loop_over_the_doctor(doctor, net, optimizer, loss_fn):
    """`train_over_the_doctor`, then the doctor's report."""
    train_over_the_doctor(doctor, net, optimizer, loss_fn)
    return doctor.report()


def test_an_empty_validation_is_named_and_a_one_pass_one_refused_at_once():
    torch.manual_seed(0)
    net = SmallCNN()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    # A generator would be spent by the doctor's first evaluation, before the first step: said at construction.
    with pytest.raises(ValueError, match=r"^validation is a one-pass iterator \(generator\).*a DataLoader$"):
        Doctor(net, optimizer, loss_fn, validation=(batch for batch in DataLoader(VAL, batch_size=64)))
    # An empty loader: read, found empty, and the report says the run was judged as without validation.
    doctor = Doctor(net, optimizer, loss_fn, [b for _ in range(2) for b in training_batches()], validation=[])
    report = loop_over_the_doctor(doctor, net, optimizer, loss_fn)
    assert "the validation given yielded no batch: judged as without validation" in report.note
    learns = report.checklist.checks[0]
    assert "(the validation given yielded no batch" in learns.detail and "training loss" in learns.detail


def test_three_lines_without_validation_or_factory_still_report():
    torch.manual_seed(0)
    net = SmallCNN(batchnorm=True)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    epochs = [batch for _ in range(10) for batch in training_batches()]
    doctor = Doctor(net, optimizer, loss_fn, epochs)  # the batches given: iterate the doctor itself
    report = loop_over_the_doctor(doctor, net, optimizer, loss_fn)
    assert report.steps == 10 * (len(TRAIN) // 64) and report.verdict == "healthy", str(report)
    learns, memorizes = report.checklist.checks[:2]
    assert learns.ok and "no validation given" in learns.detail
    assert (memorizes.ok, memorizes.detail) == (None, "not measured (no model factory given)")
    assert report is doctor.report()  # asked twice, measured once


def test_asking_for_measurements_never_ends_the_watch_finish_does_and_diagnose_is_pure():
    import dataclasses

    from doctor.diagnosis import diagnose

    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(net, optimizer, loss_fn, list(training_batches())[:8])
    hooked = []  # whether the model carried the doctor's forward hook at each step
    for x, y in doctor:
        hooked.append(bool(net._forward_hooks))
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
        with pytest.raises(RuntimeError, match=r"still watching this run: call doctor\.finish\(\)"):
            doctor.measurements()  # mid-run: refused, and the watch goes on
    assert hooked[0]  # the census of step 0 watched the model's output
    observed = doctor.finish()
    assert doctor.finish() is observed and observed.steps == 8  # finishing twice measures once
    assert not net._forward_hooks and not net[1]._forward_hooks  # the hooks are off
    assert all(not p._backward_hooks for p in net.parameters())
    assert doctor.measurements().keys() == observed.measurements.keys()
    thresholds = load_thresholds(8)
    first, second = diagnose(observed, thresholds), diagnose(observed, thresholds)
    # A value of the run and the thresholds alone (compared as JSON: NaN features are never == themselves).
    assert json.dumps(first.to_dict()) == json.dumps(second.to_dict()) and str(first) == str(second)
    assert str(doctor.report()) == str(first)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.findings = ()
    assert first.to_dict()["bigger_machine"]["conclusion"] == first.checklist.conclusion


@pytest.mark.slow
def test_the_doctor_reads_features_not_the_grid_and_never_loads_the_cells_training_code():
    # One contract for the grid and the doctor: the doctor hands the rules a features mapping, so it needs
    # neither the cell's training code nor a fake grid record (a one-row DataFrame).
    code = (
        "import sys, doctor, doctor.recipe, doctor.__main__; "
        "print(sorted(m for m in ('harness.cell', 'harness.sweep') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
    source = "".join(path.read_text() for path in (ROOT / "doctor").glob("*.py"))
    assert "empty_record" not in source and "DataFrame" not in source
