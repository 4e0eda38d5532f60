"""Bad input never becomes a wrong record: each kind gets one line naming what is wrong, before anything runs.

Parametrized over malformed files, misspelled keys in dataset and sweep files, knobs out of range and datasets
no classifier can be trained on; each case has its one expected line. Most cases are checked in-process with
`check_command_line` (what `python -m harness` runs first); a few run the real entry point for the exit code.
"""

import shutil
import subprocess

import pandas as pd
import pytest
from conftest import CONF, ROOT, SHORT, make_config, run_entry
from omegaconf import OmegaConf

from harness.cell import run_cell
from harness.checks import cell_problems
from harness.cli import check_command_line

FIRST_FAULT = min(path.stem for path in (CONF / "fault").glob("*.yaml"))  # the choices are listed sorted


def write(folder, group: str, name: str, text: str) -> None:
    (folder / group).mkdir(parents=True, exist_ok=True)
    (folder / group / f"{name}.yaml").write_text(text)


# A YAML syntax error: the file, line and column, not Hydra's 40-line traceback.
MALFORMED = {
    "fault": ("# @package _global_\nfault: {bad: lr_too_high}\nloop:\n  lr_scale: [1, 2\n", "5:1: expected ',' or ']'"),
    "dataset": ("name: bad\nloader:\n  _target_: sklearn.datasets.load_iris\n return_X_y: true\n", "4:2: "),
    "sweep": ("# @package _global_\nloop:\n  steps: 10\n\tcensus_every: 5\n", "4:1: found character '\\t'"),
}


@pytest.mark.parametrize("group", MALFORMED)
def test_a_malformed_file_is_one_line_with_its_file_line_and_column(tmp_path, group):
    text, where = MALFORMED[group]
    write(tmp_path, group, "bad", text)
    choice = "+sweep=bad" if group == "sweep" else f"{group}=bad"
    problem = check_command_line(["--config-dir", str(tmp_path), choice])
    assert problem == problem.strip() and "\n" not in problem
    assert problem.startswith(f"malformed YAML in {tmp_path / group / 'bad.yaml'}:{where}"), problem


# A key that a dataset or sweep file sets, or a sweep file's grid names, that the recipe lacks: a misspelling.
IRIS = "dataset:\n  name: glob\n  loader: {_target_: sklearn.datasets.load_iris, return_X_y: true}\n"
GRID = "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n"
MISSPELLED = {
    "a global dataset file": (
        "dataset",
        f"# @package _global_\n{IRIS}data:\n  batch_sise: 16\n",
        "dataset=typo ({dir}/dataset/typo.yaml) sets 'data.batch_sise', which the recipe does not have; "
        "did you mean 'data.batch_size'?",
    ),
    "a sweep file's recipe": (
        "sweep",
        f"{GRID}    params: {{fault: healthy}}\nloop:\n  stepz: 10\n",
        "+sweep=typo ({dir}/sweep/typo.yaml) sets 'loop.stepz', which the recipe does not have; "
        "did you mean 'loop.steps'?",
    ),
    "a sweep file's grid": (
        "sweep",
        f'{GRID}    params:\n      fault: healthy\n      model.hiden: "[4],[8]"\n',
        "+sweep=typo sweeps 'model.hiden', which the recipe does not have; did you mean 'model.hidden'?",
    ),
    "a sweep file's variants": (
        "sweep",
        f"{GRID}    params: {{fault: healthy}}\n    variants:\n      - [optimizer=sgd, optimizer.lrr=3]\n",
        "+sweep=typo sweeps 'optimizer.lrr', which the recipe does not have; did you mean 'optimizer.lr'?",
    ),
    "a sweep file's unknown option": (
        "sweep",
        f"{GRID}    params: {{fault: 'healthy,lr_too_hi'}}\n",
        f"+sweep=typo lists unknown fault 'lr_too_hi'; valid choices: {FIRST_FAULT}, ",
    ),
}


@pytest.mark.parametrize("case", MISSPELLED)
def test_a_misspelled_key_in_a_dataset_or_sweep_file_names_the_nearest_key(tmp_path, case):
    group, text, expected = MISSPELLED[case]
    write(tmp_path, group, "typo", text)
    choice = "+sweep=typo" if group == "sweep" else f"{group}=typo"
    problem = check_command_line(["--config-dir", str(tmp_path), choice])
    assert problem is not None and problem.startswith(expected.format(dir=tmp_path)), problem


def test_a_dataset_file_in_its_own_package_may_hold_any_keys(tmp_path):
    write(tmp_path, "dataset", "iris", "name: iris\nloader: {_target_: sklearn.datasets.load_iris, return_X_y: true}\n")
    # A runnable cell has its records folder tried (created): a temporary one, not the default runs/default.
    records = f"run.records={tmp_path / 'runs'}"
    assert check_command_line(["--config-dir", str(tmp_path), "dataset=iris", "model=cnn", records]) is None


# Knobs out of range: one line each, naming the key, the value and what is valid.
KNOBS = {
    "loop.steps=0": "loop.steps=0 is out of range: it must be an integer >= 1",
    "loop.eval_every=-5": "loop.eval_every=-5 is out of range: it must be an integer >= 1",
    "data.val_fraction=1.5": "data.val_fraction=1.5 is out of range: it must be a number in (0, 1)",
    "data.label_noise=-0.1": "data.label_noise=-0.1 is out of range: it must be a number in [0, 1]",
    "data.train_share=0": "data.train_share=0 is out of range: it must be a number in (0, 1]",
    "data.batch_size=0": "data.batch_size=0 is out of range: it must be an integer >= 1",
    "data.batches=streamed": "data.batches='streamed' is out of range: it must be indexed or dataloader",
    "data.batch_latency=-1": "data.batch_latency=-1 is out of range: it must be a finite number >= 0",
    "loop.lr_scale=0": "loop.lr_scale=0 is out of range: it must be a finite number > 0",
    "loop.budgets=[0,100]": "loop.budgets=[0, 100] is out of range: it must be a list of integers >= 1",
    "memorize.rates=[0.001,-1]": "memorize.rates=[0.001, -1] is out of range: it must be a list of rates > 0",
    "capacity.rates=[]": "capacity.rates=[] is out of range: it must be a list of one or more rates > 0",
    "capacity.examples=0": "capacity.examples=0 is out of range: it must be an integer >= 1",
    "model.dropout=1.0": "model.dropout=1.0 is out of range: it must be a number in [0, 1)",
    "model.hidden=[64,0]": "model.hidden=[64, 0] is out of range: it must be a list of integers >= 1",
    "run.time_limit_s=0": "run.time_limit_s=0 is out of range: it must be a finite number > 0",
    "loop.train_mode=2": "loop.train_mode=2 is out of range: it must be true or false",
    "data.order=sorted": "data.order='sorted' is out of range: it must be shuffled, fixed or class_sorted",
    "loop.clip_norm=-1": "loop.clip_norm=-1 is out of range: it must be a finite number >= 0",
    "loop.warmup_steps=1.5": "loop.warmup_steps=1.5 is out of range: it must be an integer >= 0",
    "loop.amp=maybe": "loop.amp='maybe' is out of range: it must be true or false",
}


@pytest.mark.slow
@pytest.mark.parametrize("override", KNOBS)
def test_a_knob_out_of_range_is_one_line_naming_what_is_valid(override):
    assert check_command_line([override, "+sweep=smoke"]) == KNOBS[override]  # in a sweep too, before it starts


def test_two_knobs_out_of_range_are_two_lines_in_the_recipe_s_order():
    assert check_command_line(["loop.steps=0", "data.val_fraction=2"]).splitlines() == [
        "data.val_fraction=2 is out of range: it must be a number in (0, 1)",
        KNOBS["loop.steps=0"],
    ]


# Datasets no classifier can learn from, or that cannot be split: named before any cell runs.
DATASETS = {
    "one class": (
        {"_target_": "sklearn.datasets.make_blobs", "n_samples": 100, "centers": 1, "random_state": 0},
        "dataset bad has 1 class (0 only): a classifier needs at least two",
    ),
    "a NaN feature": (
        {"_target_": "bad_datasets.nan_features"},
        "dataset bad: 1 feature values are NaN or infinite (the first at row 17, column 2); clean or impute them",
    ),
    "a class of one example": (
        {"_target_": "bad_datasets.one_lonely_example"},
        "dataset bad: class 2 has 1 example; the stratified split needs at least 2 of every class",
    ),
    "too few for the split": (
        {"_target_": "bad_datasets.too_few_for_the_split"},
        "dataset bad: 36 examples split 27 train / 9 validation (data.val_fraction=0.25), fewer than its 12 classes",
    ),
    "not a pair": ({"_target_": "bad_datasets.not_a_pair"}, "dataset bad: loader must return (X, y), got ndarray"),
    "ragged": (
        {"_target_": "bad_datasets.ragged"},
        "dataset bad: X must be 2-D with one row per label, got X (11, 2) and 10 labels",
    ),
    "a loader that raises": (
        {"_target_": "sklearn.datasets.make_blobs", "n_samples": -3},
        "dataset bad: its loader raised ",
    ),
}


def bad_dataset(loader: dict):
    cfg = make_config(*SHORT)
    OmegaConf.set_struct(cfg, False)
    cfg.dataset = {"name": "bad", "loader": loader}
    return cfg


@pytest.mark.parametrize("case", DATASETS)
def test_a_dataset_that_cannot_be_split_is_one_line_and_its_cell_fails(case):
    loader, expected = DATASETS[case]
    cfg = bad_dataset(loader)
    problems = cell_problems([cfg, cfg])  # two cells of one dataset: loaded once, said once
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    record = run_cell(cfg)  # a cell run some other way still fails with that line, never an ok record
    assert record["status"] == "failed" and expected.split(":")[-1].strip()[:20] in record["error"]


@pytest.mark.slow
def test_a_single_class_dataset_in_a_sweep_exits_2_with_one_line_before_any_cell(tmp_path, records):
    write(tmp_path, "dataset", "one", "name: one\nloader: {_target_: sklearn.datasets.make_blobs, centers: 1}\n")
    result = run_entry("--config-dir", str(tmp_path), "+sweep=smoke", "dataset=digits,one", f"run.records={records}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: dataset one has 1 class (0 only): a classifier needs at least two"
    ]
    assert not list(records.glob("*.parquet"))


@pytest.mark.slow
def test_a_malformed_fault_file_and_a_knob_out_of_range_exit_2_from_the_command_line(tmp_path, records):
    write(tmp_path, "fault", "bad", MALFORMED["fault"][0])
    result = run_entry("--config-dir", str(tmp_path), "fault=bad", f"run.records={records}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: malformed YAML in {tmp_path / 'fault' / 'bad.yaml'}:5:1: expected ',' or ']', but got '<stream end>'"
    ]
    result = run_entry("loop.steps=0", "data.val_fraction=2", f"run.records={records}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: data.val_fraction=2 is out of range: it must be a number in (0, 1)",
        f"error: {KNOBS['loop.steps=0']}",
    ]
    assert not records.exists()


# The grid's own command line (issue 34): a seed numpy cannot take, no workers, a value list given to one cell.
SEED_RANGE = "is out of range: it must be an integer from 0 to 4294967295 (numpy's seed range)"
NO_WORKERS = (
    "hydra.sweeper.n_jobs=0 is out of range: it must be a number of workers >= 1, or negative to count back from "
    "the CPU cores (-1 every core, -2 all but one); `make sweep JOBS=N` sets it"
)
ONE_CELL = "lists values to sweep, but this command runs one cell: add -m to run one cell per value, or +sweep=NAME"
GRID_LINES = {
    "a negative seed": (["seed=-1"], f"seed=-1 {SEED_RANGE}"),
    "a seed past numpy's range": (["seed=4294967296"], f"seed=4294967296 {SEED_RANGE}"),
    "a seed that is no integer": (["seed=1.5"], f"seed=1.5 {SEED_RANGE}"),
    "a negative seed in a sweep": (["+sweep=smoke", "seed=-1"], f"seed=-1 {SEED_RANGE}"),
    "no workers": (["+sweep=smoke", "hydra.sweeper.n_jobs=0"], NO_WORKERS),
    "two faults given to one cell": (
        ["fault=healthy,lr_too_high"],
        f"fault=healthy,lr_too_high {ONE_CELL} to run them as that grid's fault axis (make sweep "
        'ARGS="fault=healthy,lr_too_high"); fault=[healthy,lr_too_high] plants them together in one cell',
    ),
    "seeds given to one cell": (
        ["seed=0,1"],
        f'seed=0,1 {ONE_CELL} to run them as that grid\'s seed axis (make sweep ARGS="seed=0,1")',
    ),
    "a glob given to one cell": (
        ["fault=glob(healthy_*)"],
        f"fault=glob(healthy_*) {ONE_CELL} to run them as that grid's fault axis (make sweep "
        'ARGS="fault=glob(healthy_*)")',
    ),
    "a list knob's values given to one cell": (
        ["loop.budgets=50,100"],
        f"loop.budgets=50,100 {ONE_CELL} to run them as that grid's loop.budgets axis (make sweep "
        'ARGS="loop.budgets=50,100"); a list value is written loop.budgets=[50,100]',
    ),
}


@pytest.mark.parametrize("case", GRID_LINES)
def test_a_bad_seed_no_workers_or_a_value_list_for_one_cell_is_one_line(tmp_path, case):
    arguments, expected = GRID_LINES[case]
    assert check_command_line([*arguments, f"run.records={tmp_path / 'runs'}"]) == expected
    assert not (tmp_path / "runs").exists()


# What joblib and numpy take, and the value lists a grid runs: no line.
GRID_ACCEPTED = {
    "the largest seed": ["seed=4294967295"],
    "all cores but one": ["+sweep=smoke", "hydra.sweeper.n_jobs=-2"],
    "two faults as a grid with -m": ["-m", "fault=healthy,lr_too_high"],
    "two faults as a named grid's axis": ["+sweep=smoke", "fault=healthy,lr_too_high"],
    "two faults planted in one cell": ["fault=[healthy,lr_too_high]"],
}


@pytest.mark.parametrize("case", GRID_ACCEPTED)
def test_what_joblib_numpy_and_a_grid_take_passes_the_check(tmp_path, case):
    assert check_command_line([*GRID_ACCEPTED[case], f"run.records={tmp_path / 'runs'}"]) is None


def test_the_grid_sweeper_itself_refuses_no_workers_in_one_line(capsys):
    from hydra_plugins.doctor_grid_sweeper.grid_sweeper import GridSweeper

    with pytest.raises(SystemExit) as stop:
        GridSweeper(n_jobs=0).sweep([])  # before it composes a cell (it was never set up)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {NO_WORKERS}"]


MAKE_JOBS = ["0", "-0", "abc", "2.5"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("jobs", MAKE_JOBS)
def test_make_sweep_refuses_a_worker_count_joblib_refuses_in_one_line(tmp_path, jobs):
    # -n: a dry run (the guard fires while make reads the Makefile, before any target, setup included)
    result = subprocess.run(
        ["make", "-n", "sweep", f"JOBS={jobs}", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"Makefile:20: *** JOBS={jobs} is out of range: it must be a number of workers >= 1, or negative to count "
        "back from the CPU cores (-1 every core, -2 all but one).  Stop."
    ]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_sweep_hands_a_negative_worker_count_to_joblib(tmp_path):
    result = subprocess.run(
        ["make", "-n", "sweep", "JOBS=-2", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0 and "hydra.sweeper.n_jobs=-2" in result.stdout


# A fault file that switches the optimizer: its keys are checked against the optimizer it switches to.
SWITCH_BY_TARGET = (
    "# @package _global_\nfault: {f: lr_too_low}\noptimizer:\n  _target_: torch.optim.SGD\n  lr: 1.0e-3\n"
)
SWITCH_BY_DEFAULTS = "# @package _global_\ndefaults:\n  - override /optimizer: sgd_momentum\nfault: {f: lr_too_high}\n"
FAULT_FILES = {
    "SGD with momentum by _target_": (f"{SWITCH_BY_TARGET}  momentum: 0.9\n", [], None),
    "momentum by _target_ over plain SGD": (f"{SWITCH_BY_TARGET}  momentum: 0.9\n", ["optimizer=sgd"], None),
    "SGD with momentum by the defaults list": (f"{SWITCH_BY_DEFAULTS}loop: {{lr_scale: 100.0}}\n", [], None),
    "an argument the recipe's Adam leaves at its default": (
        "# @package _global_\nfault: {f: lr_too_high}\noptimizer: {betas: [0.5, 0.9]}\n",
        [],
        None,
    ),
    "a misspelled argument of the optimizer switched to": (
        f"{SWITCH_BY_TARGET}  momentun: 0.9\n",
        [],
        "fault=f ({dir}/fault/f.yaml) sets 'optimizer.momentun', which torch.optim.SGD does not take; "
        "did you mean 'optimizer.momentum'?",
    ),
    "a misspelled key beside a defaults switch": (
        f"{SWITCH_BY_DEFAULTS}optimizer: {{momentun: 0.5}}\n",
        [],
        "fault=f ({dir}/fault/f.yaml) sets 'optimizer.momentun', which the recipe does not have; "
        "did you mean 'optimizer.momentum'?",
    ),
    "a target that cannot be imported": (
        "# @package _global_\nfault: {f: lr_too_low}\noptimizer: {_target_: torch.optim.SDG, momentum: 0.9}\n",
        [],
        "fault=f ({dir}/fault/f.yaml) sets 'optimizer.momentum', which torch.optim.SDG does not take; "
        "it cannot be imported",
    ),
}


@pytest.mark.parametrize("case", FAULT_FILES)
def test_a_fault_file_that_switches_the_optimizer_is_checked_against_that_optimizer(tmp_path, case):
    text, overrides, expected = FAULT_FILES[case]
    write(tmp_path, "fault", "f", text)
    records = f"run.records={tmp_path / 'runs'}"
    problem = check_command_line(["--config-dir", str(tmp_path), "fault=f", *overrides, records])
    assert problem == (expected.format(dir=tmp_path) if expected else None)


def sweeper_cells(config_dir, faults: str) -> list:
    """The cells the grid sweeper composes for `fault=<faults>` with `--config-dir config_dir`, as Hydra adds it."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext

    from hydra_plugins.doctor_grid_sweeper.grid_sweeper import GridSweeper

    # The search path `python -m harness --config-dir DIR` composes from (hydra/_internal/utils.py, add_conf_dir):
    # the sweeper reads a fault file through it, as in a real sweep.
    search_path = create_config_search_path(str(CONF))
    search_path.prepend("command-line", f"file://{config_dir}", anchor=SearchPathQuery(provider="schema"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # restores Hydra's global state after
        GlobalHydra.instance().clear()
        Hydra.create_main_hydra2(task_name="test", config_search_path=search_path)
        config = compose("config", return_hydra_config=True)
        context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=None)
        sweeper = GridSweeper(params={"fault": faults})
        sweeper.setup(hydra_context=context, task_function=None, config=config)
        return sweeper.compose_cells([])


def test_the_grid_sweeper_composes_both_optimizer_switches_and_refuses_their_typos(tmp_path, capsys):
    # A fault named only in a sweep file's grid is checked by the sweeper, not the command line: the same rule.
    write(tmp_path, "fault", "by_target", FAULT_FILES["SGD with momentum by _target_"][0])
    write(tmp_path, "fault", "by_defaults", FAULT_FILES["SGD with momentum by the defaults list"][0])
    cells = sweeper_cells(tmp_path, "by_target,by_defaults,healthy")
    assert [(c.optimizer._target_, c.optimizer.get("momentum")) for c in cells] == [
        ("torch.optim.SGD", 0.9),
        ("torch.optim.SGD", 0.9),
        ("torch.optim.Adam", None),
    ]
    for name, case in [
        ("typo_target", "a misspelled argument of the optimizer switched to"),
        ("typo_defaults", "a misspelled key beside a defaults switch"),
    ]:
        write(tmp_path, "fault", name, FAULT_FILES[case][0])
        with pytest.raises(SystemExit) as stop:
            sweeper_cells(tmp_path, f"healthy,{name}")
        assert stop.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: fault={name} ") and "sets 'optimizer.momentun', which " in line, line
        assert line.endswith("; did you mean 'optimizer.momentum'?"), line


# The same refusals from the real entry point: exit 2, one line, no record.
ENTRY_LINES = {
    "a negative seed in a sweep's range": (["+sweep=smoke", "seed=range(-1,1)"], f"seed=-1 {SEED_RANGE}"),
    "no workers": (["+sweep=smoke", "hydra.sweeper.n_jobs=0"], NO_WORKERS),
    "two faults given to one cell": (["fault=healthy,lr_too_high"], GRID_LINES["two faults given to one cell"][1]),
    "a misspelled argument of the optimizer switched to": (
        ["--config-dir", "{dir}", "fault=f"],
        FAULT_FILES["a misspelled argument of the optimizer switched to"][2],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", ENTRY_LINES)
def test_the_grid_s_bad_input_exits_2_with_one_line_before_any_cell(tmp_path, records, case):
    write(tmp_path, "fault", "f", FAULT_FILES["a misspelled argument of the optimizer switched to"][0])
    arguments, expected = ENTRY_LINES[case]
    result = run_entry(*[a.format(dir=tmp_path) for a in arguments], f"run.records={records}")
    assert (result.returncode, result.stderr.splitlines()) == (2, [f"error: {expected.format(dir=tmp_path)}"])
    assert not list(records.glob("*.parquet"))


@pytest.mark.slow
def test_both_optimizer_switches_run_in_a_sweep_with_momentum(tmp_path, records):
    for name, case in [
        ("by_target", "SGD with momentum by _target_"),
        ("by_defaults", "SGD with momentum by the defaults list"),
    ]:
        write(tmp_path, "fault", name, FAULT_FILES[case][0].replace("{f:", f"{{{name}:"))  # each file its own name
    grid = ["--config-dir", str(tmp_path), "+sweep=smoke", "fault=by_target,by_defaults", "dataset=digits"]
    result = run_entry(*grid, f"run.records={records}", "hydra.sweeper.n_jobs=1")
    assert result.returncode == 0, result.stderr
    rows = pd.read_parquet(records).sort_values("fault")
    assert list(rows.fault) == ["by_defaults", "by_target"] and set(rows.status) == {"ok"}
    assert all("_target_: torch.optim.SGD" in y and "momentum: 0.9" in y for y in rows.config_yaml)
