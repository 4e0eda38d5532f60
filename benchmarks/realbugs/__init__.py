"""Real bugs from real programs: Keras programs from Stack Overflow and GitHub, ported to PyTorch doctor recipes.

Each subject folder holds `buggy.py` and `fixed.py`, two doctor recipes whose `train(Doctor)` is the original
program's loop, and the small data files they read (with their source). `subjects.csv` is the ground truth
and the published tools' results; `python -m benchmarks.realbugs` (`make realbugs`) runs them all.
"""
