"""Features: the one contract between what the instruments measure and what the rules read.

`features(measurements)` turns one plain mapping of measurements (a grid record, or what the doctor measured on
a user's run: the same keys, see harness/records.py) into a plain mapping of named features. Every feature is
normalized by something the run itself provides, so that it means the same on any task, optimizer, loop and
model: the class prior instead of 1/C, the run's own reference fit instead of a fixed accuracy, the step's own
compute time instead of a fixed share of the loop, the run's length instead of a fixed count. `FEATURES` is
the table: name, sentence, what it is normalized by, whether it spans orders of magnitude (then thresholds sit
at geometric midpoints and plots use log axes), how it is computed, and the record columns it is computed from
(`reads`: checked against harness/columns.py when the feature is built; the computation sees no other column).
Each feature is declared with its family in analysis/declarations/ (what a feature is: analysis/feature.py);
this module puts them in order (by family, `FAMILIES`) and says which of them the quick references' floor turns off.

`at_budget(records, steps)` gives the grid's records as they were at a step budget (each cell keeps a snapshot
of its measurements at every budget it reached), so that the same features can be read on shorter runs.
"""

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from analysis.declarations import (
    capacity,
    data,
    initialization,
    language,
    loop,
    naive,
    outcome,
    outputs,
    parameters,
    schedule,
)
from analysis.feature import column
from analysis.yardsticks import too_few_in_class
from harness.column import BATCH_INDICES, EVERY_STEP, STEPS_DONE
from harness.columns import ALONG_THE_RUN, CHECKPOINT_COLUMNS, DECLARED_IN

if TYPE_CHECKING:  # pandas is loaded where a table is built, so judging one run (the doctor) never loads it
    import pandas as pd

__all__ = [
    "FAMILIES",
    "FEATURES",
    "FEATURES_LIST",
    "REFERENCE_COLUMNS",
    "REFERENCE_FLOOR",
    "RESTS_ON_REFERENCES",
    "at_budget",
    "budgets_of",
    "feature_table",
    "features",
    "too_few_for_references",
    "too_few_in_class",  # the class mix's floor (analysis/yardsticks.py), said by the doctor with the references'
]

# The families in the order the feature table's columns and docs/features.md's rows show them: each family's
# features in the order its module declares them, then the naive readings (naive.py). A new feature is declared in
# its family's module of analysis/declarations/ and nowhere else.
FAMILIES = (loop, parameters, schedule, outputs, initialization, language, data, capacity, outcome)
FEATURES_LIST = [feature for family in FAMILIES for feature in family.DECLARED] + naive.NAIVE_FEATURES_LIST
FEATURES = {f.name: f for f in FEATURES_LIST}
if len(FEATURES) != len(FEATURES_LIST):  # two families declaring one name: the second would silently win
    raise ValueError(f"features declared twice: {sorted({f.name for f in FEATURES_LIST if FEATURES[f.name] is not f})}")


# The quick references' columns (harness/reference.py declares them): a feature that reads one rests on them.
REFERENCE_COLUMNS = frozenset(name for name, where in DECLARED_IN.items() if where == "harness/reference.py")
RESTS_ON_REFERENCES = frozenset(f.name for f in FEATURES_LIST if REFERENCE_COLUMNS.intersection(f.reads))
# The fewest held-out examples the references may be scored on for a feature to rest on them. An accuracy on n
# examples has a standard error of up to 0.5 / sqrt(n): 9 points at 30, wider than most shortfalls the rules weigh,
# and a 5-NN vote fitted on a handful of examples says nothing (a batch-1 loop whose few kept examples leave 3 to
# score on). Below it those features are not judged (NaN), and the doctor says so; every problem of the grid and
# the zoo holds 50 or more.
REFERENCE_FLOOR = 30


def too_few_for_references(measurements: Mapping) -> str | None:
    """Why the features resting on the quick references are not judged on this run (None: they are).

    The floor reads the distinct held-out examples: forty rows that are eight examples repeated are eight draws.
    A record from before the distinct rows were counted (schema 24) is read on its examples alone.
    """
    held_out = column(measurements, "reference_val_examples")
    distinct = column(measurements, "reference_val_distinct")
    if 0 < held_out < REFERENCE_FLOOR:
        return (
            f"the quick references were scored on {held_out:.0f} held-out examples, fewer than {REFERENCE_FLOOR}: too"
            " few to tell a shortfall from noise"
        )
    if 0 < distinct < REFERENCE_FLOOR:
        return (
            f"the quick references were scored on {held_out:.0f} held-out examples, {distinct:.0f} of them distinct,"
            f" fewer than {REFERENCE_FLOOR}: too few to tell a shortfall from noise"
        )
    return None


def features(measurements: Mapping) -> dict[str, float]:
    """The named features of one run's measurements (NaN where a measurement is missing).

    Those resting on the quick references are NaN where the references were scored on too few examples
    (`too_few_for_references`).
    """
    values = {f.name: f.of(measurements) for f in FEATURES_LIST}
    if too_few_for_references(measurements) is not None:
        values.update(dict.fromkeys(RESTS_ON_REFERENCES, math.nan))
    return values


def feature_table(records: "pd.DataFrame") -> "pd.DataFrame":
    """`features` of every record, one row each, same index."""
    import pandas as pd

    rows = [features(m) for m in records.to_dict("records")]
    return pd.DataFrame(rows, index=records.index, columns=list(FEATURES)).astype(float)


def budgets_of(records: "pd.DataFrame") -> list[int]:
    """Every step budget some record passed through (a snapshot before its end), and the longest run's end.

    A run cut short on purpose (still_improving stops at 20, 60 or 150 steps) ends at its own length: that is
    no budget the grid's runs were measured at, so it makes none (its snapshots at the grid's budgets count).
    """
    found, ends = set(), set()
    for snapshots in records.get("checkpoints", ()):
        steps = sorted(int(s["steps"]) for s in _list(snapshots))
        found.update(steps[:-1])
        ends.update(steps[-1:])
    return sorted(found | ({max(ends)} if ends else set()))


def _list(value) -> list:
    return [] if value is None else list(value)


def at_budget(records: "pd.DataFrame", steps: int) -> "pd.DataFrame":
    """The records as they were after `steps` training steps: records that never got there are left out.

    The snapshot's measurements replace the record's own (the columns declared per_budget), and every list laid
    along the run is cut at that step by its declaration (harness/columns.py: ALONG_THE_RUN), whatever reads it.
    """
    import pandas as pd

    rows, index = [], []
    for key, record in zip(records.index, records.to_dict("records"), strict=True):
        snapshot = next((s for s in _list(record.get("checkpoints")) if s["steps"] == steps), None)
        if snapshot is None:
            continue
        cut = {**record, **{k: snapshot[k] for k in CHECKPOINT_COLUMNS if k in snapshot}}
        cut.update(cut_along_the_run(record, steps))
        rows.append(cut)
        index.append(key)
    return pd.DataFrame(rows, index=index, columns=records.columns)


def cut_along_the_run(record: Mapping, steps: int) -> dict[str, list]:
    """Every list of the record laid along the run (of the columns it has), as it stood after `steps` steps."""
    within = {BATCH_INDICES: lambda s: s < steps, STEPS_DONE: lambda s: s <= steps}  # 0-based batches; steps done
    cut = {}
    for name, along in ALONG_THE_RUN.items():
        if name not in record:
            continue
        values = _list(record.get(name))
        if along == EVERY_STEP:
            cut[name] = values[:steps]
        elif along in within:
            cut[name] = [s for s in values if within[along](s)]
        else:  # one value at each step of the column named: kept where that step is
            kept = [within[ALONG_THE_RUN[along]](s) for s in _list(record.get(along))]
            cut[name] = [value for value, keep in zip(values, kept, strict=False) if keep]
    return cut
