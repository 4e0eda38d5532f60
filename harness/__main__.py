"""Command line: `python -m harness [overrides]` runs one cell, `python -m harness +sweep=NAME` a grid.

See `make help`. The Hydra entry stays thin: a launcher may pickle it for every cell (Hydra issue 1180).
"""

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from harness.cli import check_command_line, split_arguments


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def hydra_entry(cfg):
    from harness.sweep import run_and_save  # imported here: the parent of a sweep never needs torch

    outcome = run_and_save(cfg)
    if HydraConfig.get().mode == RunMode.RUN:  # one cell from the command line: say how it went
        detail = f": {outcome['error']}" if outcome["error"] else f" in {outcome['wall_s']:.1f} s"
        print(f"cell {outcome['cell_id']}: {outcome['status']}{detail}  (records: {cfg.run.records})")
        if outcome["status"] == "failed":
            sys.exit(1)
    return outcome


def main() -> None:
    problem = check_command_line(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    # Flags first: Hydra's argument parser takes no override after a flag such as --config-dir, and
    # `make sweep ARGS="--config-dir extra/ fault=mine"` puts them after the grid's own overrides.
    flags, overrides, _, _ = split_arguments(sys.argv[1:])
    sys.argv[1:] = flags + overrides
    hydra_entry()


if __name__ == "__main__":
    main()
