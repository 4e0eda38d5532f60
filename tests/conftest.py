"""Shared test helpers: compose configs with Hydra's compose API, short runs, and the real entry point."""

import copy
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
FAULTS = sorted(p.stem for p in (CONF / "fault").glob("*.yaml"))  # the planted sizes: the default grid's faults
# Every fault file in a subfolder, named as a Hydra option (`mild/lr_too_high`, `lm/no_causal_mask`).
NESTED = sorted(p.relative_to(CONF / "fault").with_suffix("").as_posix() for p in (CONF / "fault").glob("*/**/*.yaml"))
# Other sizes of the planted faults: conf/fault/mild/ and conf/fault/extreme/.
SIZES = [name for name in NESTED if not name.startswith("lm/")]
# The language-model family's own faults (conf/fault/lm/: model=causal_lm, dataset=stdlib_text) and their sizes.
LM_FAULTS = [name for name in NESTED if name.startswith("lm/") and name.count("/") == 1]
LM_SIZES = [name for name in NESTED if name.startswith("lm/") and name.count("/") == 2]
LM = ["model=causal_lm", "dataset=stdlib_text"]  # the family the language-model faults are planted in
ZOO = sorted(f"zoo/{p.stem}" for p in (CONF / "dataset" / "zoo").glob("*.yaml"))
DATASETS = sorted(p.stem for p in (CONF / "dataset").glob("*.yaml"))
# The datasets of one class per example, which every fault of conf/fault/ is planted on with the MLP: a text dataset
# (a `text` node: next-token targets per position, for model=causal_lm) is not among them.
CLASS_DATASETS = [d for d in DATASETS if "text" not in OmegaConf.load(CONF / "dataset" / f"{d}.yaml")]
DEVICES = sorted(p.stem for p in (CONF / "device").glob("*.yaml"))
# Short runs: enough steps for every instrument to fire (census at 0, 10, 20, 30), a fraction of the cost.
SHORT = ["loop.steps=40", "loop.eval_every=20", "loop.census_every=10", "memorize.steps=30", "capacity.steps=30"]


def make_config(*overrides: str):
    """The composed config, exactly as a sweep cell gets it (without the hydra node): a copy the test may change."""
    return copy.deepcopy(_composed(overrides))


@functools.cache  # a composition costs about 0.12 s and the tests ask for the same ones again; conf/ never changes
def _composed(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def run_entry(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m harness ARGS` as a user would; returns the finished process (text output)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def records(tmp_path) -> Path:
    return tmp_path / "records"


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (`pytestmark = pytest.mark.usefixtures("one_thread")`).

    Tiny models run fastest on one thread, and on a busy machine a second thread only slows them down.
    """
    import torch  # here, not at the top: test_startup.py's sweep imports this module and must not load torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def no_loss_mode_left_entered():
    """Every test leaves no loss-reading mode entered (harness/instruments/loss_inputs.py).

    A mode left on torch's stack would see every torch call of the tests after it, the way it would every later
    step of a user's program: the observer must leave it at each step's end, however the step ends.
    """
    yield
    import sys

    loss_inputs = sys.modules.get("harness.instruments.loss_inputs")  # not imported: no mode can be entered
    if loss_inputs is not None and loss_inputs.LossCalls.entered:
        entered, loss_inputs.LossCalls.entered = loss_inputs.LossCalls.entered, 0
        raise AssertionError(f"{entered} loss-reading mode(s) left entered after the test")


@pytest.fixture(autouse=True)
def no_collection_timer_left_registered():
    """Every test leaves the garbage collector's callbacks as it found them (harness/instruments/data_wait.py).

    The doctor times the collections only while it times the batches: one left registered would be told of every
    later collection of the user's program.
    """
    import gc

    before = list(gc.callbacks)
    yield
    left = [callback for callback in gc.callbacks if callback not in before]
    for callback in left:
        gc.callbacks.remove(callback)
    assert not left, f"{len(left)} garbage-collection callback(s) left registered after the test: {left}"
