"""Command line: `python -m harness [overrides]` runs one cell, `python -m harness +sweep=NAME` a grid.

See `make help`. The Hydra entry stays thin: a launcher may pickle it for every cell (Hydra issue 1180).
"""

import atexit
import gc
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
        status = "not run here, running elsewhere" if outcome["status"] == "elsewhere" else outcome["status"]
        print(f"cell {outcome['cell_id']}: {status}{detail}  (records: {cfg.run.records})")
        if outcome["status"] in ("failed", "elsewhere"):
            sys.exit(1)
    return outcome


def main() -> None:
    # At exit every record is written: Python's last garbage collection need not walk the objects torch and
    # scikit-learn left (1 to 2 s of CPU when cells ran in this process: one cell, or a sweep with one job).
    atexit.register(gc.freeze)
    problem = check_command_line(sys.argv[1:])
    if problem:
        for line in problem.splitlines():  # one line per problem (two knobs out of range: two lines)
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    # Flags first: Hydra's argument parser takes no override after a flag such as --config-dir, and
    # `make sweep ARGS="--config-dir extra/ fault=mine"` puts them after the grid's own overrides.
    flags, overrides, _, _ = split_arguments(sys.argv[1:])
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
