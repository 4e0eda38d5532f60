"""The grid sweeper composes every cell of every named sweep exactly as Hydra's `compose()` does.

The sweeper takes shortcuts through Hydra's private API (see hydra_plugins/doctor_grid_sweeper/grid_sweeper.py):
it composes once per choice of config groups, merges fault files onto a composition without a fault, and applies
plain value overrides itself. These tests hold it to Hydra's public answer: for each job's overrides (which start
with `+sweep=<name>`), `compose("config", job)` must give the very config the sweeper hands the cell. The fast
test checks a spread of cells of every small sweep file of conf/sweep/; the slow one checks every cell of every one.
"""

import pytest
from conftest import CONF
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import HydraContext
from omegaconf import OmegaConf

from hydra_plugins.doctor_grid_sweeper.grid_sweeper import GridSweeper

SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
# Grids whose own composition takes the sweeper 10 s or more (hundreds of cells, or every fault pair tried):
# only the slow test composes them.
LARGE = {"pairs", "zoo_faults", "zoo_healthy"}
SPREAD = 6  # cells per sweep in the fast test: the first, the last and four between


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
        picked = range(len(jobs)) if every else sorted({round(i * last / (SPREAD - 1)) for i in range(SPREAD)})
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
def test_every_cell_of_each_sweep_is_what_compose_gives(sweep):
    compared, cells = compare(sweep, every=True)
    assert compared == cells
