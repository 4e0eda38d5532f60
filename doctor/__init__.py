"""The training-run doctor: the grid's checks and rules on your own PyTorch training run.

from doctor import Doctor, probe          # watch a loop, or let the doctor run one
from doctor import diagnose, Observed     # judge a finished run (doctor.finish()) under any thresholds

The names are loaded on first use (PEP 562), so that `python -m doctor` can answer a Ctrl-C that comes while torch
is still being imported in one line (doctor/__main__.py), and `import doctor.machine` loads no more than it needs.
"""

import importlib

_HOMES = {
    **dict.fromkeys(("CannotJudge", "UnsupportedTask"), "doctor.refusals"),
    **dict.fromkeys(("Check", "Checklist"), "doctor.machine"),
    "Doctor": "doctor.watch",
    "Observed": "doctor.observed",
    "Report": "doctor.report",
    "diagnose": "doctor.diagnosis",
    "probe": "doctor.probe_loop",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    """The package's names, imported from their modules when first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module 'doctor' has no attribute {name!r}; it offers {', '.join(__all__)}")
    return getattr(importlib.import_module(_HOMES[name]), name)
