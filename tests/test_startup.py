"""A sweep's start-up and exit: the datasets are checked in a worker, and the workers freeze their imports."""

import atexit
import gc
import subprocess
import sys

import pytest
from conftest import ROOT, SHORT, make_config
from joblib import Parallel, delayed
from omegaconf import OmegaConf

from harness import checks
from harness.checks import dataset_problems, distinct_datasets
from harness.sweep import warm_worker


def cells_of(*datasets, val_fraction=0.25):
    cells = []
    for loader in datasets:
        cfg = make_config(*SHORT)
        OmegaConf.set_struct(cfg, False)
        if loader is not None:
            spec = {key: value for key, value in loader.items() if key != "_name"}
            cfg.dataset = {"name": loader.get("_name", "bad"), "loader": spec}
        cfg.data.val_fraction = val_fraction
        cells.append(cfg)
    return cells


ONE_CLASS = {"_name": "one", "_target_": "sklearn.datasets.make_blobs", "n_samples": 50, "centers": 1}
RAISES = {"_name": "raises", "_target_": "sklearn.datasets.make_blobs", "n_samples": -3}
TINY = {"_name": "tiny", "_target_": "sklearn.datasets.make_blobs", "n_samples": 12, "centers": 4, "random_state": 0}


def test_the_distinct_datasets_of_a_grid_say_what_all_its_cells_say_in_the_same_order():
    # The digits and three bad datasets at two split fractions, some of them twice: the worker is sent one small
    # plain cell per dataset and fraction, and says the same lines in the same order.
    cells = cells_of(None, RAISES, None, TINY, ONE_CLASS, val_fraction=0.25)
    cells += cells_of(TINY, None, RAISES, val_fraction=0.95)
    distinct = distinct_datasets(cells)
    assert len(distinct) == 7  # digits, raises, tiny, one class at 0.25; tiny, digits, raises at 0.95
    assert all(isinstance(cell, dict) and set(cell) == {"dataset", "data"} for cell in distinct)
    said = dataset_problems(cells)
    assert [line.split(":")[0].split(" has")[0] for line in said] == [
        "dataset raises",  # its loader raised: said once, whatever the fraction
        "dataset tiny",  # 3 validation examples for 4 classes
        "dataset one",  # one class
        "dataset tiny",  # at 0.95: no training example left
    ]
    assert dataset_problems(distinct, keep=False) == said


def test_a_check_that_does_not_keep_leaves_the_process_s_datasets_as_they_were():
    before = set(checks._LOADED)
    fine = {"_name": "fine", "_target_": "sklearn.datasets.make_blobs", "n_samples": 40, "random_state": 5}
    assert dataset_problems(distinct_datasets(cells_of(fine)), keep=False) == []
    assert set(checks._LOADED) == before
    assert dataset_problems(cells_of(fine)) == []  # kept, as before
    assert len(checks._LOADED) == len(before) + 1


def freezes() -> tuple[int, int, bool]:
    """`warm_worker` twice in the process that runs this: exit handlers each call added, and whether any is frozen."""
    import torch._dynamo  # noqa: F401 - imported first: the exit handlers counted are warm_worker's own

    import harness.cell  # noqa: F401

    counts = [atexit._ncallbacks()]
    for _ in range(2):
        warm_worker()
        counts.append(atexit._ncallbacks())
    return counts[1] - counts[0], counts[2] - counts[1], gc.get_freeze_count() > 0


@pytest.mark.slow  # a sweep in its own process (about 12 s)
def test_only_a_worker_process_freezes_its_imports_once():
    assert freezes() == (0, 0, False)  # the sweep's own process, or one running the cells itself, is left as it is
    assert gc.isenabled()
    # In a worker: frozen, and its exit handler registered once (by this call, or by an earlier test's).
    for first, second, frozen in Parallel(n_jobs=2, backend="loky")(delayed(freezes)() for _ in range(2)):
        assert frozen and first <= 1 and second == 0


@pytest.mark.slow
def test_a_sweep_s_own_process_imports_neither_torch_nor_scikit_learn(tmp_path):
    script = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from conftest import SHORT, make_config
from harness.sweep import run_cells
cells = [make_config(*SHORT, f"seed={{seed}}", f"run.records={str(tmp_path)!r}") for seed in (0, 1)]
counts = run_cells(cells, n_jobs=2)
print(counts["ok"], sorted(m for m in ("torch", "sklearn", "scipy") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "2 []"
