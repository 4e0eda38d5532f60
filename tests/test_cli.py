"""Bad input gets one line naming the valid choices and a non-zero exit.

A fault or dataset kept outside the repository works through --config-dir, as docs/grid.md shows.
"""

import pandas as pd
import pytest
from conftest import CONF, DATASETS, FAULTS, NESTED, SHORT, SIZES, ZOO, make_config, run_entry

BAD = {
    "fault=lr_too_hi": "unknown fault 'lr_too_hi'; valid choices: " + ", ".join(FAULTS + NESTED),
    "fault=mild/lr_too_hi": "unknown fault 'mild/lr_too_hi'",
    "dataset=mnist": "unknown dataset 'mnist'; valid choices: " + ", ".join(DATASETS + ZOO),
    "optimizer=lbfgs": "unknown optimizer 'lbfgs'; valid choices: adam, adamw, rmsprop, sgd, sgd_momentum",
    "device=tpu": "unknown device 'tpu'; valid choices: cpu, cuda",
    "+sweep=huge": "unknown sweep 'huge'; valid choices: "
    + ", ".join(sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))),
    "fault=healthy,nope": "unknown fault 'nope'",
    "fault=[lr_too_high,nope]": "unknown fault 'nope'",
    "fault==": "malformed override 'fault=='",
    "optimizer.lrr=0.1": "Key 'lrr' is not in struct",
    "seed=abc": "seed='abc' is out of range: it must be an integer from 0 to 4294967295",
}


@pytest.mark.parametrize("argument", BAD)
def test_bad_input_gets_one_line_and_a_non_zero_exit(argument, records):
    result = run_entry("+sweep=smoke" if "sweep" not in argument else "seed=0", argument, f"run.records={records}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and BAD[argument] in lines[0]
    assert not records.exists()


def test_a_fault_file_that_does_not_name_itself_is_refused(tmp_path, records):
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "nameless.yaml").write_text("# @package _global_\noptimizer:\n  lr: 0.5\n")
    result = run_entry("--config-dir", str(tmp_path), "fault=nameless", f"run.records={records}")
    assert result.returncode == 2
    why = "no fault chosen: a fault file adds `fault: {<name>: <verdict>}`, e.g. {healthy: healthy}"
    assert result.stderr.strip().splitlines() == [f"error: fault=nameless: {why}"]


def test_a_fault_file_in_the_old_name_and_diagnosis_form_is_refused(tmp_path, records):
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "old.yaml").write_text("# @package _global_\nfault: {name: old, diagnosis: lr_too_low}\n")
    result = run_entry("--config-dir", str(tmp_path), "fault=old", f"run.records={records}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: fault=old: a fault file names itself as `fault: {<name>: <verdict>}`, not with name/diagnosis keys"
    ]


# A misspelled key in a fault file would run a healthy cell under the fault's label: refused before any cell runs.
MISSPELLED = {
    "data: {shufle_labels: true}": "'data.shufle_labels', which the recipe does not have; did you mean "
    "'data.shuffle_labels'?",
    "loop: {zero_gradd: 0}": "'loop.zero_gradd', which the recipe does not have; did you mean 'loop.zero_grad_every'?",
    "optimizer: {lrr: 0.5}": "'optimizer.lrr', which the recipe does not have; did you mean 'optimizer.lr'?",
    "model: {hiden: [4]}": "'model.hiden', which the recipe does not have; did you mean 'model.hidden'?",
    "lopp: {steps: 10}": "'lopp', which the recipe does not have; did you mean 'loop'?",
}


@pytest.mark.slow
@pytest.mark.parametrize("line", MISSPELLED)
@pytest.mark.parametrize("how", ["one cell", "a sweep"])
def test_a_misspelled_key_in_a_fault_file_is_one_line_naming_the_nearest_key(tmp_path, records, line, how):
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "typo.yaml").write_text(f"# @package _global_\nfault: {{typo: lr_too_low}}\n{line}\n")
    grid = ["+sweep=smoke", "fault=typo,healthy"] if how == "a sweep" else ["fault=typo"]
    result = run_entry("--config-dir", str(tmp_path), *grid, f"run.records={records}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    where = tmp_path / "fault" / "typo.yaml"  # the file is named: it may be anywhere --config-dir points
    assert (
        len(lines) == 1 and lines[0].startswith(f"error: fault=typo ({where}) sets ") and MISSPELLED[line] in lines[0]
    )
    assert not records.exists()


@pytest.mark.parametrize("fault", FAULTS + SIZES)
def test_every_fault_file_sets_only_keys_the_recipe_has_each_in_its_range(fault):
    from harness.checks import knob_problems
    from harness.cli import added_keys

    planted = make_config(f"fault={fault}")
    assert added_keys(make_config("~fault"), planted) == []
    assert knob_problems(planted) == []


@pytest.mark.slow
def test_a_new_fault_and_a_new_dataset_from_outside_the_repository(tmp_path, records):
    (tmp_path / "fault").mkdir()
    (tmp_path / "dataset").mkdir()
    (tmp_path / "fault" / "sgd_no_momentum.yaml").write_text(
        "# @package _global_\n"
        "# Plain SGD at Adam's rate: far too slow for 600 steps.\n"
        "fault: {sgd_no_momentum: lr_too_low}\n"
        "optimizer: {_target_: torch.optim.SGD, lr: 1.0e-3}\n"
    )
    (tmp_path / "dataset" / "iris.yaml").write_text(
        "name: iris\nloader: {_target_: sklearn.datasets.load_iris, return_X_y: true}\n"
    )
    result = run_entry(
        "--config-dir",
        str(tmp_path),
        "fault=sgd_no_momentum",
        "dataset=iris",
        "data.batch_size=16",
        f"run.records={records}",
        *SHORT,
    )
    assert result.returncode == 0, result.stderr
    assert "cell sgd_no_momentum-iris-cpu-s0-" in result.stdout and ": ok in" in result.stdout
    row = pd.read_parquet(records).iloc[0]
    assert (row.fault, row.diagnosis, row.dataset, row.n_classes, row.status) == (
        "sgd_no_momentum",
        "lr_too_low",
        "iris",
        3,
        "ok",
    )
    assert "_target_: torch.optim.SGD" in row.config_yaml


@pytest.mark.slow
def test_a_glob_over_faults_checks_every_file_it_finds(tmp_path):
    from harness.cli import check_command_line

    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "zz_old.yaml").write_text("# @package _global_\nfault: {name: old, diagnosis: lr_too_low}\n")
    problem = check_command_line(["--config-dir", str(tmp_path), "-m", "fault=glob(*)"])  # a glob is a grid
    assert problem is not None and problem.startswith("fault=zz_old: a fault file names itself")
    assert check_command_line(["--config-dir", str(tmp_path), "-m", "fault=glob(*,exclude=zz_*)"]) is None
