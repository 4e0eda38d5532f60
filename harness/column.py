"""Declaring a record column: its name, its kind, what it means, and whether each step budget keeps it.

The module that produces a column declares it, once, as a `Column` in a tuple named `COLUMNS`: a collector's class
attribute (harness/instruments/), or a module constant; `<WHAT>_COLUMNS` where one module produces two groups
(harness/instruments/memorization.py). harness/columns.py assembles the record's table from those tuples, reading
them from the modules' source rather than importing the modules (it says why); so a declaration is written with
`Column`, `list_of` and the kinds below only. This module imports nothing: the doctor and the sweep read it without
torch or pyarrow. A kind is one of KINDS, or `list_of(kind)`; harness/records.py maps each to its pyarrow type.
"""

from dataclasses import dataclass

F64, I64, I32, STR, BOOL = "float64", "int64", "int32", "string", "bool"
# What a list column is laid along, so that the record can be cut at a step budget as if the run had stopped there
# (analysis/features.py: at_budget) by its declaration alone:
EVERY_STEP = "every step"  # one value per training step, in order: the first N are the run at N steps
BATCH_INDICES = "batch indices"  # its values are 0-based batch indices: those below N happened within N steps
STEPS_DONE = "steps done"  # its values count the steps done (0 = before training): those up to N
NOT_ALONG_THE_RUN = "not along the run"  # per parameter, per rate, per data size: a budget cannot cut it
# or the name of a column of BATCH_INDICES or STEPS_DONE: one value at each of those steps, cut with it
ALONG = (EVERY_STEP, BATCH_INDICES, STEPS_DONE, NOT_ALONG_THE_RUN)
TIMESTAMP = "timestamp[us, UTC]"  # when a cell started
KINDS = (F64, I64, I32, STR, BOOL, TIMESTAMP)


def list_of(kind: str) -> str:
    """The kind of a column that holds a list of `kind` values (a curve, one value per parameter, ...)."""
    if kind not in KINDS:
        raise ValueError(f"unknown column kind {kind!r}; known: {', '.join(KINDS)}")
    return f"list<{kind}>"


def is_kind(kind: str) -> bool:
    """Whether `kind` is one of KINDS or a list of one."""
    if kind.startswith("list<") and kind.endswith(">"):
        return kind[len("list<") : -1] in KINDS
    return kind in KINDS


@dataclass(frozen=True)
class Column:
    """One record column as the module producing it declares it."""

    name: str
    kind: str
    meaning: str  # what the value is: docs/records.md and the parquet field's "doc" metadata say this
    # Taken again at every step budget (loop.budgets), as if the run had stopped there, into the record's
    # `checkpoints`; only a scalar a collector's snapshot returns (or the final scores) can be.
    per_budget: bool = False
    # A list's layout along the run: one of ALONG, or the name of the column holding the step of each value. Every
    # list says, so that no curve is read at its end-of-run length when the rules are fitted at a shorter budget.
    along: str | None = None

    def __post_init__(self):
        # At the declaring module's import: a kind pyarrow has no type for must not wait for the first record.
        if not is_kind(self.kind):
            raise ValueError(
                f"column {self.name!r} has an unknown kind {self.kind!r}; known: {', '.join(KINDS)}, or list_of(one)"
            )
        if self.kind.startswith("list<") and not self.along:
            raise ValueError(
                f"list column {self.name!r} must say what it is laid along (along=): {', '.join(ALONG)}, or the name"
                " of the column holding the step of each value"
            )
        if self.along and not self.kind.startswith("list<"):
            raise ValueError(f"column {self.name!r} is no list: only a list is laid along the run (along=)")
