"""The grid sweeper composes every cell of every named sweep exactly as Hydra's `compose()` does.

The sweeper takes shortcuts through Hydra's private API (see hydra_plugins/doctor_grid_sweeper/grid_sweeper.py):
it composes once per choice of config groups, merges fault files onto a composition without a fault, and applies
plain value overrides itself. These tests hold it to Hydra's public answer: for each job's overrides (which start
with `+sweep=<name>`), `compose("config", job)` must give the very config the sweeper hands the cell. The fast
test checks a spread of cells of every small sweep file of conf/sweep/. The slow one checks, in every one, each
composition the sweeper makes and each thing it does to one: every override value in some cell (each fault file
merged, each seed and plain value set), and every pair of config-group choices other than the fault found together
in some cell (each composition: dataset with model, optimizer, device). Composing every cell of every sweep with
Hydra took 373 s of the slow suite's 2222 (zoo_faults' 1274 cells alone 126), most of it cells that differ from
one checked only in their fault or seed.
"""

from itertools import combinations

import pytest
from conftest import CONF
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext
from omegaconf import OmegaConf

from harness.checks import ConfigError
from harness.cli import group_options
from hydra_plugins.doctor_grid_sweeper.grid_sweeper import GridSweeper

SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
# Grids whose own composition takes the sweeper 3 s or more (tens to hundreds of cells, or every fault pair tried):
# only the slow test composes them, every composition of every grid.
LARGE = {"pairs", "zoo_faults", "zoo_healthy", "default", "cnn", "gru", "lm", "transformer"}
SPREAD = 3  # cells per sweep in the fast test: the first, the middle and the last


# The config groups: a folder of conf/ (fault, dataset, model, ...); any other override sets a plain value.
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir())


def covering_cells(jobs: list[list[str]]) -> list[int]:
    """The cells, in order, that each hold an override or a pair of group choices (not the fault) no earlier one held.

    Every override is then found in a cell picked, and every pair of group choices other than the fault found
    together in some cell is found together in a cell picked: one pass, deterministic (the sweeper's order).
    """
    covered: set[frozenset] = set()
    picked = []
    for index, job in enumerate(jobs):
        overrides = sorted(set(job))
        composing = [o for o in overrides if o.split("=")[0] in GROUPS and o.split("=")[0] != "fault"]
        held = {frozenset(pair) for pair in combinations(composing, 2)} | {frozenset([one]) for one in overrides}
        if held - covered:
            picked.append(index)
            covered |= held
    return picked


def compare(sweep: str, every: bool) -> tuple[int, int]:
    """Compose the sweep's cells both ways and assert they are equal; returns (cells compared, cells)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("config", overrides=[f"+sweep={sweep}"], return_hydra_config=True)
        grid = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
        sweeper = GridSweeper(**{key: grid[key] for key in ("params", "pairs", "variants") if key in grid})
        context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=None)
        sweeper.setup(hydra_context=context, task_function=None, config=config)
        arguments = [f"+sweep={sweep}"]  # what Hydra hands a sweeper: the command line's task overrides
        jobs, cells = sweeper.job_overrides(arguments), sweeper.compose_cells(arguments)
        assert len(jobs) == len(cells) > 0
        last = len(jobs) - 1
        picked = covering_cells(jobs) if every else sorted({round(i * last / (SPREAD - 1)) for i in range(SPREAD)})
        for index in picked:
            reference = compose("config", overrides=jobs[index])
            assert OmegaConf.to_container(cells[index]) == OmegaConf.to_container(reference, resolve=True), (
                f"{sweep}: cell {index} ({' '.join(jobs[index])}) differs from Hydra's compose()"
            )
    return len(picked), len(jobs)


@pytest.mark.parametrize("sweep", sorted(set(SWEEPS) - LARGE))
def test_a_spread_of_cells_of_each_sweep_is_what_compose_gives(sweep):
    compared, cells = compare(sweep, every=False)
    assert compared == min(SPREAD, cells)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS)
def test_each_composition_and_override_of_each_sweep_is_what_compose_gives(sweep):
    compared, cells = compare(sweep, every=True)
    assert 0 < compared <= cells


def test_the_covering_cells_hold_every_override_and_every_pair_of_compositions():
    jobs = [
        [f"fault={f}", f"dataset={d}", f"optimizer={o}", f"seed={s}"]
        for f in "ab"
        for d in "xyz"
        for o in ("adam", "sgd")
        for s in "01"
    ]
    picked = [jobs[i] for i in covering_cells(jobs)]
    assert {o for job in picked for o in job} == {o for job in jobs for o in job}
    pairs = lambda cells: {(job[1], job[2]) for job in cells}  # noqa: E731 - (dataset, optimizer)
    assert pairs(picked) == pairs(jobs)
    # The six compositions, one more cell for the second seed and one for the second fault: 8 of 24.
    assert len(picked) == 8 and picked[0] == jobs[0]


def test_the_zoo_finds_every_fault_file_at_every_size_as_the_default_grid_finds_its_own():
    # The zoo's fault list was written by hand, so `make fit` never fitted a new fault (issue 52); it is a glob into
    # conf/fault/'s subfolders now, expanded by the grid sweeper.
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("config", overrides=["+sweep=zoo_faults"], return_hydra_config=True)
        grid = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
        sweeper = GridSweeper(params=grid["params"], variants=grid["variants"])
        sweeper.setup(
            hydra_context=HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=None),
            task_function=None,
            config=config,
        )
        jobs = sweeper.job_overrides(["+sweep=zoo_faults"])
        with pytest.raises(ConfigError, match=r"fault=glob\(\[sizes/\*\]\) finds no option in conf/fault/sizes"):
            sweeper._nested_glob(OverridesParser.create(), "fault", "glob([sizes/*])")
    faults = [next(o.split("=", 1)[1] for o in job if o.startswith("fault=")) for job in jobs]
    # Every file of conf/fault/ and of its mild/ and extreme/ folders (the language models' lm/ are another grid's).
    every = [o for o in group_options("fault", []) if o.rpartition("/")[0] in ("", "mild", "extreme")]
    assert sorted(set(faults)) == sorted(every) and len(jobs) == len(every) * len(grid["variants"])
    assert {"mild/lr_too_high", "extreme/lr_too_high", "lr_too_high", "healthy"} <= set(faults)
