"""Command line: `python -m harness [overrides]` runs one cell, `python -m harness +sweep=NAME` a grid.

See `make help`. The Hydra entry stays thin: a launcher may pickle it for every cell (Hydra issue 1180).
"""

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from harness.cli import check_command_line, searchpath_override, split_arguments
from harness.records import check_writable

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # hydra_entry's config_path, as a folder


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def hydra_entry(cfg):
    from harness.sweep import run_and_save  # imported here: the parent of a sweep never needs torch

    outcome = run_and_save(cfg)
    if HydraConfig.get().mode == RunMode.RUN:  # one cell from the command line: say how it went
        detail = f": {outcome['error']}" if outcome["error"] else f" in {outcome['wall_s']:.1f} s"
        status = "not run here, running elsewhere" if outcome["status"] == "elsewhere" else outcome["status"]
        print(f"cell {outcome['cell_id']}: {status}{detail}  (records: {cfg.run.records})")
        if outcome["status"] in ("failed", "elsewhere"):
            sys.exit(1)
    return outcome


def single_run_records(flags: list[str], overrides: list[str], config_dirs: list) -> str | None:
    """The records folder of a one-cell run, or None for a sweep (run_cells checks its folders itself).

    Hydra creates its run folder inside the records folder before the task starts, and reports a folder it
    cannot create with a traceback; so a one-cell run's folder is composed and tried here first (0.2 s).
    """
    if any(f in flags for f in ("-m", "--multirun", "-cn", "--config-name", "-cp", "--config-path")):
        return None  # a sweep, or another primary config: Hydra and run_cells have the last word
    if any(o.lstrip("+").startswith("sweep=") for o in overrides):
        return None  # a named grid (conf/sweep/): a sweep, whose folders run_cells tries; spares a composition
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    searchpath = searchpath_override(config_dirs)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*searchpath, *overrides], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException):
        return None  # a sweep override (seed=0,1) or the like: Hydra reports it as it runs
    return None if cfg.hydra.mode == RunMode.MULTIRUN else str(cfg.run.records)


def main() -> None:
    problem = check_command_line(sys.argv[1:])
    if problem:
        for line in problem.splitlines():  # one line per problem (two knobs out of range: two lines)
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    # Flags first: Hydra's argument parser takes no override after a flag such as --config-dir, and
    # `make sweep ARGS="--config-dir extra/ fault=mine"` puts them after the grid's own overrides.
    flags, overrides, config_dirs, inspecting = split_arguments(sys.argv[1:])
    records = None if inspecting else single_run_records(flags, overrides, config_dirs)
    reason = records and check_writable(records)
    if reason:
        print(f"error: records folder {records} cannot be written: {reason}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = flags + overrides
    try:
        hydra_entry()
    except KeyboardInterrupt:
        # A sweep prints its own summary and exits 130 itself; this is Ctrl-C anywhere else (one cell, or
        # while Hydra composes): the records written so far are whole, and nothing else needs saying.
        print("interrupted: every record written so far is kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
