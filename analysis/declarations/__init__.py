"""The features' declarations, one module per family of checks, as analysis/checks/ has the checks.

A family module (loop.py, parameters.py, schedule.py, outputs.py, initialization.py, language.py, data.py,
capacity.py) declares the features its checks read as `Feature`s (analysis/feature.py) in a module-level
`DECLARED` tuple; outcome.py declares those the outcome gate reads, and naive.py the raw readings of the first,
hand-set rules. A declaration names its formula: a one-liner in place, a formula of its family's own above it, or
one of analysis/yardsticks.py (the run against its data's yardsticks) and analysis/loss_curves.py (the run's
loss curves). analysis/features.py assembles them into FEATURES_LIST in the order the tables and docs show.
"""
