"""The record's columns, assembled from the declarations of the modules that produce them.

Every column is declared once, as a `Column` (harness/column.py: name, kind, meaning, whether each step budget
keeps it), by the module that produces it: each collector of harness/instruments/ in its class attribute `COLUMNS`;
harness/cell.py the cell's identity, run and data sizes; harness/reference.py, harness/timing.py and
harness/instruments/memorization.py their end-of-run measurements; harness/after_training.py the class count, the
uninformed loss and the final scores, which it sets for both harness/cell.py and the doctor (doctor/after_the_loop.py).

The declarations are read from the modules' source, not imported: importing a collector imports torch, and the
sweep's own process, which compares every record folder it scans with the schema, never imports torch
(harness/sweep.py); nor may `import doctor` load pyarrow. So each `COLUMNS` or `<WHAT>_COLUMNS` tuple of `Column(...)`
in harness/**/*.py is cut out of its file's text, parsed with `ast` and evaluated alone (a few milliseconds; a file
whose declarations are not laid out as ruff formats them is parsed whole), which is why a declaration may use only
`Column`, `list_of` and the kinds. A module that declares a column twice, an unknown kind or two modules
declaring one name fail here, at import, naming the column.

harness/records.py turns the table into the pyarrow schema; analysis/docs.py into docs/records.md; the rules'
features (analysis/feature.py) read NAMES and CHECKPOINT_COLUMNS. The schema's id is a fingerprint of these
declarations (harness/records.py: SCHEMA_ID), so a column declared or changed makes a new schema by itself.
"""

import ast
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

from harness.column import (
    BATCH_INDICES,
    BOOL,
    EVERY_STEP,
    F64,
    I32,
    I64,
    KINDS,
    NOT_ALONG_THE_RUN,
    STEPS_DONE,
    STR,
    TIMESTAMP,
    Column,
    list_of,
)

__all__ = [
    "BOOL",
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "DECLARED",
    "DECLARED_IN",
    "F64",
    "I32",
    "I64",
    "KINDS",
    "NAMES",
    "STR",
    "TIMESTAMP",
    "Column",
    "list_of",
]

READER = Path(__file__).resolve()
HARNESS = READER.parent


# All a declaration may name: it is evaluated without its module's imports.
_DECLARATION_NAMES = {"Column": Column, "list_of": list_of, "F64": F64, "I64": I64, "I32": I32, "STR": STR}
_DECLARATION_NAMES |= {"BOOL": BOOL, "TIMESTAMP": TIMESTAMP}
_DECLARATION_NAMES |= {"EVERY_STEP": EVERY_STEP, "BATCH_INDICES": BATCH_INDICES, "STEPS_DONE": STEPS_DONE}
_DECLARATION_NAMES |= {"NOT_ALONG_THE_RUN": NOT_ALONG_THE_RUN}


class Declaration(NamedTuple):
    """One module's (or one collector's) declared columns, and where they are declared."""

    where: str  # the file, and the collector class or the tuple's name where a file declares more than one
    columns: tuple[Column, ...]


def _declaring_assignments(tree: ast.Module):
    """(class name or None, tuple name, value) of each `COLUMNS` / `<WHAT>_COLUMNS` tuple of `Column(...)` calls."""
    candidates = [(None, node) for node in tree.body]
    candidates += [(node.name, inner) for node in tree.body if isinstance(node, ast.ClassDef) for inner in node.body]
    for owner, node in candidates:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name, value = node.targets[0].id, node.value
        if not (name == "COLUMNS" or name.endswith("_COLUMNS")) or not isinstance(value, ast.Tuple) or not value.elts:
            continue
        first = value.elts[0]
        if isinstance(first, ast.Call) and isinstance(first.func, ast.Name) and first.func.id == "Column":
            yield owner, name, value


# A declaration as ruff formats one: `COLUMNS = (` (or `<WHAT>_COLUMNS = (`) ending its line, at the top level or in a
# class, closed by a `)` alone on a line at the same indentation.
_OPENING = re.compile(r"^(?P<indent> *)(?P<name>COLUMNS|[A-Z_]+_COLUMNS) = \($", re.MULTILINE)
_CLASS = re.compile(r"^class (\w+)\b", re.MULTILINE)


def _declaration_segments(source: str) -> ast.Module | None:
    """Only the declarations of `source`, parsed: a module of `class` bodies and assignments, or None where unsure.

    Parsing whole files cost most of `import harness.columns` (about 30 ms of 21 files; `import doctor` pays it), so
    only the declarations are cut out and parsed. Where a `Column(` lies outside every segment cut (a declaration
    written on one line, or formatted otherwise), None: the caller parses the whole file.
    """
    body: list[ast.stmt] = []
    inside = 0  # how many `Column(` the segments hold
    for opening in _OPENING.finditer(source):
        indent = opening["indent"]
        end = source.find(f"\n{indent})\n", opening.end())
        if end < 0:
            return None
        segment = source[opening.start() : end + len(indent) + 2]
        inside += segment.count("Column(")
        try:
            assignment = ast.parse(textwrap.dedent(segment)).body[0]
        except SyntaxError:  # the `)` found closes something else: not laid out as expected
            return None
        if not indent:
            body.append(assignment)
            continue
        owners = [found[1] for found in _CLASS.finditer(source, 0, opening.start())]
        if not owners:
            return None
        body.append(ast.ClassDef(name=owners[-1], body=[assignment], bases=[], keywords=[], decorator_list=[]))
    return ast.Module(body=body, type_ignores=[]) if inside == source.count("Column(") else None


def declarations_in(path: Path, where: str) -> list[Declaration]:
    """The column declarations in the source of the module at `path` (`where`: how to name the file)."""
    source = path.read_text()
    if "Column(" not in source:  # most modules declare nothing: not worth parsing
        return []
    found = []
    tree = _declaration_segments(source) or ast.parse(source, str(path))
    for owner, name, value in _declaring_assignments(tree):
        label = f"{where} ({owner})" if owner else where if name == "COLUMNS" else f"{where} ({name})"
        try:
            columns = eval(compile(ast.Expression(value), str(path), "eval"), dict(_DECLARATION_NAMES))
        except NameError as error:
            raise ValueError(
                f"{label}: a column declaration is read from the source, not imported, so it may name only"
                f" {', '.join(_DECLARATION_NAMES)} ({error})"
            ) from error
        except ValueError as error:  # an unknown kind: say where
            raise ValueError(f"{label}: {error}") from error
        if not all(isinstance(column, Column) for column in columns):
            raise ValueError(f"{label}: {name} holds something other than Column(...)")
        found.append(Declaration(label, columns))
    return found


def harness_declarations() -> list[Declaration]:
    """Every declaration in harness/**/*.py: file by file in path order, harness/cell.py first, each in its order."""
    found = []
    # harness/cell.py first: a record opens with what cell it is (its id, fault, dataset, seed, status).
    for path in sorted(HARNESS.rglob("*.py"), key=lambda path: (path != HARNESS / "cell.py", path)):
        if path == READER:  # this module reads the declarations and makes none (tests/test_columns.py holds it so)
            continue
        found += declarations_in(path, path.relative_to(HARNESS.parent).as_posix())
    return found


def assemble(declarations: list[Declaration]) -> dict[str, tuple[Column, str]]:
    """Each declared column by name, with where it is declared; a name declared twice is an error."""
    table: dict[str, tuple[Column, str]] = {}
    for where, columns in declarations:
        for column in columns:
            if column.name in table:
                raise ValueError(f"column {column.name!r} is declared twice: in {table[column.name][1]} and in {where}")
            table[column.name] = (column, where)
    return table


_TABLE = assemble(harness_declarations())
# The record's columns in the order of their declarations: file by file in path order (harness_declarations).
DECLARED: list[Column] = [column for column, _ in _TABLE.values()]
DECLARED_IN: dict[str, str] = {name: where for name, (_, where) in _TABLE.items()}
COLUMNS: list[tuple[str, str, str]] = [(column.name, column.kind, column.meaning) for column in DECLARED]
NAMES = {column.name for column in DECLARED}
# The measurements that move as a run goes on (declared per_budget), taken again at every step budget (loop.budgets)
# as if the run had stopped there; the record's own columns of these names are the snapshot at the run's end.
CHECKPOINT_COLUMNS = [column.name for column in DECLARED if column.per_budget]


def along_the_run(declared: list[Column]) -> dict[str, str]:
    """Each list laid along the run, with its layout (harness/column.py: ALONG).

    A list laid along another column must name one whose values are steps.
    """
    steps = {column.name for column in declared if column.along in (BATCH_INDICES, STEPS_DONE)}
    found = {}
    for column in declared:
        if column.along in (None, NOT_ALONG_THE_RUN):
            continue
        if column.along not in (EVERY_STEP, *steps, BATCH_INDICES, STEPS_DONE):
            raise ValueError(
                f"column {column.name!r} is laid along {column.along!r}: neither a layout"
                f" ({EVERY_STEP}, {BATCH_INDICES}, {STEPS_DONE}, {NOT_ALONG_THE_RUN}) nor a column of steps"
                f" ({', '.join(sorted(steps))})"
            )
        found[column.name] = column.along
    return found


# The lists a step budget cuts (analysis/features.py: at_budget), by declaration: every curve, every list of steps.
ALONG_THE_RUN = along_the_run(DECLARED)
