"""The working programs (`make working`): each names its source, runs under the doctor, and the runner scores them.

`make working` is the benchmark (3 seeds, each program's own length); these tests run two programs on a short
budget (WORKING_EPOCH_CAP=2, and the doctor's own fits
cut to 10 steps: BENCHMARK_FIT_STEPS_CAP) in the fast suite and every program under `-m slow`.
"""

import json

import pytest

from benchmarks.runner import FIT_STEPS_CAP_VARIABLE
from benchmarks.working.__main__ import HERE, main, programs, source_of, summarize
from benchmarks.working.common import EPOCH_CAP_VARIABLE, stdlib_bytes

PROGRAMS = programs()
FAST = ("regression",)


def test_there_are_programs_and_each_names_a_source_with_a_commit():
    assert PROGRAMS, "no working programs found"
    for name, source in PROGRAMS.items():
        repository, _, commit = source.rpartition(" @ ")
        assert "/" in repository.split()[0] and len(commit) == 40, f"{name}: SOURCE {source!r}"
        text = (HERE / f"{name}.py").read_text()
        assert text.startswith('"""') and "def train(Doctor)" in text, name
        assert "Design kept" in text, f"{name}: the docstring lists the design facts kept"


def test_a_recipe_without_a_source_is_refused_by_name(tmp_path):
    recipe = tmp_path / "nameless.py"
    recipe.write_text('"""No source."""\n')
    with pytest.raises(ValueError, match=r"nameless\.py has no SOURCE"):
        source_of(recipe)


def test_the_corpus_is_split_by_file_and_the_splits_differ():
    train, validation = stdlib_bytes("train", 5000), stdlib_bytes("validation", 5000)
    assert len(train) == 5000 and len(validation) == 5000
    assert int(train.max()) < 256 and not bool((train[:1000] == validation[:1000]).all())
    with pytest.raises(ValueError, match="choose train or validation"):
        stdlib_bytes("test", 10)


def test_called_healthy_is_the_majority_of_seeds_and_a_refusal_is_not_healthy():
    results = [
        {"program": "a", "seed": 0, "verdict": "healthy"},
        {"program": "a", "seed": 1, "verdict": "healthy"},
        {"program": "a", "seed": 2, "verdict": "dead_relu"},
        {"program": "b", "seed": 0, "verdict": None, "error": "refused: no task"},
        {"program": "b", "seed": 1, "verdict": "healthy"},
        {"program": "b", "seed": 2, "verdict": None, "error": "refused: no task"},
    ]
    assert [s["healthy"] for s in summarize(["a", "b"], results)] == [True, False]


def test_an_unknown_program_is_a_one_line_error_naming_the_choices(capsys):
    assert main(["--programs", "no_such_program"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "unknown program no_such_program: choose from" in error


def _short_run(monkeypatch, tmp_path, name):
    monkeypatch.setenv(EPOCH_CAP_VARIABLE, "2")
    monkeypatch.setenv(FIT_STEPS_CAP_VARIABLE, "10")  # the doctor's fits too: the CNN's capacity fit took 400 s
    assert main(["--programs", name, "--seeds", "1", "--jobs", "1", "--out", str(tmp_path)]) == 0
    line = (tmp_path / "working.lines").read_text().strip()
    assert line.startswith("working called-healthy ") and line.endswith("/1")
    result = json.loads(next(tmp_path.glob(f"{name}-s0-*.json")).read_text())
    # The doctor judged it, or refused it in its own words (a task it does not cover): the recipe never crashed.
    assert result["verdict"] is not None or result["error"].startswith("refused: "), result["error"]


@pytest.mark.parametrize("name", FAST)
def test_a_few_programs_run_under_the_doctor_on_a_short_budget(monkeypatch, tmp_path, name):
    _short_run(monkeypatch, tmp_path, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in PROGRAMS if n not in FAST])
def test_every_program_runs_under_the_doctor_on_a_short_budget(monkeypatch, tmp_path, name):
    _short_run(monkeypatch, tmp_path, name)


LOADER_WITH_WORKERS = '''"""A tiny recipe whose DataLoader starts a worker process, as the CIFAR-10 tutorial's does."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

X = torch.randn(128, 4)
Y = (X[:, 0] > 0).long()
loss = nn.CrossEntropyLoss()


def model():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def batches():
    return DataLoader(TensorDataset(X, Y), batch_size=32, num_workers=1)


def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)
'''


@pytest.mark.slow  # a pool of processes (about 15 s)
def test_a_recipe_whose_loader_has_worker_processes_runs_in_the_benchmarks_pool(tmp_path):
    # In a loky worker the default start method is loky's, whose processes a DataLoader cannot start.
    from benchmarks import runner

    recipe = tmp_path / "loader_with_workers.py"
    recipe.write_text(LOADER_WITH_WORKERS)
    tasks = [(recipe, seed, {"program": "loader"}, tmp_path / f"out{seed}.json") for seed in range(2)]
    results = runner.run_cached(tasks, jobs=2, force=True)
    assert [r["error"] for r in results] == [None, None]
    assert all(r["verdict"] is not None for r in results)
