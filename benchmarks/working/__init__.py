"""Working programs nobody here designed, re-created from public sources as doctor recipes (`make working`).

Each recipe keeps its source's design as facts (model, sizes, loss, optimizer and rates, schedule, batch size,
loop structure), names that source in SOURCE and in its docstring, and swaps only the data for data that needs
no download (common.py). They measure false alarms: a working program should be called healthy. Evaluation
only: nothing is fitted or tuned on them.
"""
