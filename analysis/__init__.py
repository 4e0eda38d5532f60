"""Analysis of the fault grid: load the records, fit and apply the rules, score them, write the report.

from analysis import load_records, diagnose
df = load_records("runs/default")
"""

from analysis.load import load_records
from analysis.rules import diagnose

__all__ = ["diagnose", "load_records"]
