"""Bad input never becomes a wrong record: each kind gets one line naming what is wrong, before anything runs.

Parametrized over malformed files, misspelled keys in dataset and sweep files, knobs out of range and datasets
no classifier can be trained on; each case has its one expected line. Most cases are checked in-process with
`check_command_line` (what `python -m harness` runs first); a few run the real entry point for the exit code.
"""

import pytest
from conftest import CONF, SHORT, make_config, run_entry
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
    "data.order=sorted": "data.order='sorted' is out of range: it must be shuffled, fixed, class_sorted",
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
