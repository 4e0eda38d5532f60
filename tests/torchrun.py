"""Two gloo ranks under torchrun for the tests: one launch of a script that runs named cases on every rank.

The script (tests/ddp_runs.py, tests/ddp_integration_runs.py) takes OUT and the cases, runs them one after the
other on every rank, and writes OUT/CASE.rank<R>.json; `launch` returns what each rank wrote.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from benchmarks.realbugs.traincheck.ranks import free_port


def launch(script: str, out: Path, cases: tuple[str, ...]) -> dict:
    """Run tests/`script` on two ranks with `python -m torch.distributed.run`: {(case, rank): what the rank wrote}."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port"]
    command += [str(free_port()), str(ROOT / "tests" / script), str(out), *cases]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return {
        (case, rank): json.loads((out / f"{case}.rank{rank}.json").read_text()) for case in cases for rank in (0, 1)
    }
