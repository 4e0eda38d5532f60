"""Analysis of the fault grid: load the records, fit and apply the rules, score them, write the report.

from analysis import load_records, diagnose
df = load_records("runs/default")

The two names are loaded on first use (PEP 562), so importing one module of the package (the doctor imports
analysis.rules) does not load pandas and pyarrow through analysis.load.
"""

import importlib

_HOMES = {"diagnose": "analysis.rules", "load_records": "analysis.load"}
__all__ = ["diagnose", "load_records"]


def __getattr__(name: str):
    """`analysis.load_records` and `analysis.diagnose`, imported from their modules when first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}; it offers {', '.join(__all__)}")
    return getattr(importlib.import_module(_HOMES[name]), name)
