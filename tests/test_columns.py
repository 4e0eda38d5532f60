"""Each record column is declared once, by the module that produces it, and each producer returns what it declares.

harness/columns.py assembles the table from the declarations, read from the modules' source (harness/column.py);
these tests run the producers and compare what they return with what they declare, and make the assembly fail on
a column declared twice or of an unknown kind.
"""

import ast
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from torch import nn

from harness import after_training, cell, columns, reference, timing
from harness.column import F64, Column
from harness.columns import DECLARED, Declaration, assemble, declarations_in, harness_declarations
from harness.instruments import Instruments, fit_capacity, memorize
from harness.instruments.memorization import CAPACITY_COLUMNS, MEMORIZE_COLUMNS
from harness.records import SCHEMA, SCHEMA_ID, schema_id


def names(declared) -> set[str]:
    return {column.name for column in declared}


@pytest.fixture(scope="module")
def observed() -> tuple[Instruments, dict[type, set[str]], dict[type, set[str]]]:
    """A few steps of a 4-in, 3-class loop with dropout and validation: each collector's snapshot and final columns."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=2)
    batches = [(torch.randn(16, 4), torch.randint(0, 3, (16,))) for _ in range(5)]
    for x, y in instruments.watch(batches):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    instruments.log_validation(instruments.step, 1.0, 0.5)
    snapshot = {type(c): set(c.columns(final=False)) for c in instruments.collectors}
    instruments.finish()
    final = {type(c): set(c.columns(final=True)) for c in instruments.collectors}
    return instruments, snapshot, final


def test_each_collector_returns_exactly_the_columns_it_declares(observed):
    instruments, snapshot, final = observed
    for collector in instruments.collectors:
        declared = type(collector).COLUMNS
        assert final[type(collector)] == names(declared), type(collector).__name__
        per_budget = {column.name for column in declared if column.per_budget}
        assert snapshot[type(collector)] == per_budget, type(collector).__name__


def test_each_collector_s_declaration_is_the_one_the_table_was_assembled_from(observed):
    instruments, _, _ = observed
    declaring = [type(c) for c in instruments.collectors if type(c).COLUMNS]
    assert len(declaring) == len(instruments.collectors) - 1  # KeptExamples returns no column
    for kind in declaring:
        where = f"{kind.__module__.replace('.', '/')}.py ({kind.__name__})"
        assert [c for c in columns.DECLARED if columns.DECLARED_IN[c.name] == where] == list(kind.COLUMNS)


def test_the_end_of_run_measurements_return_exactly_the_columns_their_modules_declare():
    torch.manual_seed(0)
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))

    def factory():
        return nn.Linear(4, 3)

    loss = nn.CrossEntropyLoss()
    assert set(memorize(factory, x[:8], y[:8], loss, rates=[1e-2], steps=3)) == names(MEMORIZE_COLUMNS)
    assert set(fit_capacity(factory, [(x, y)], loss, rates=[1e-2], steps=3)) == names(CAPACITY_COLUMNS)
    assert set(reference.reference_fit(x[:30], y[:30], x[30:], y[30:])) == names(reference.COLUMNS)
    assert set(reference.EMPTY) == names(reference.COLUMNS)
    clock = timing.DeviceClock(torch.device("cpu"), warmup=0)
    assert set(clock.finish()) == names(timing.COLUMNS)
    scores = dict.fromkeys(after_training.SCORE_COLUMNS, 0.5)
    assert set(after_training.run_record({}, scores, {}, 3, 1.1)) == names(after_training.COLUMNS)


def test_a_run_s_record_refuses_a_column_produced_twice_and_scores_it_does_not_know():
    scores = dict.fromkeys(after_training.SCORE_COLUMNS, 0.5)
    with pytest.raises(ValueError, match="columns produced twice in one record: first_loss"):
        after_training.run_record({"first_loss": 2.0}, scores, {"first_loss": 2.1}, 3, 1.1)
    with pytest.raises(ValueError, match="scores must hold exactly final_train_loss"):
        after_training.run_record({}, {**scores, "final_test_acc": 0.4}, {}, 3, 1.1)


def test_every_column_is_declared_once_and_the_schema_holds_them_all():
    declared = [column.name for _, found in harness_declarations() for column in found]
    assert [name for name, n in Counter(declared).items() if n > 1] == []
    assert set(declared) == columns.NAMES == set(SCHEMA.names) - {"checkpoints"}
    assert names(cell.COLUMNS) <= columns.NAMES and names(after_training.COLUMNS) <= columns.NAMES
    per_budget = {column.name for column in columns.DECLARED if column.per_budget}
    assert set(columns.CHECKPOINT_COLUMNS) == per_budget


def declaring_modules() -> list[Path]:
    return [p for p in sorted(columns.HARNESS.rglob("*.py")) if "Column(" in p.read_text() and p != columns.READER]


def dumped(tree: ast.Module) -> list[tuple]:
    return [(owner, name, ast.dump(value)) for owner, name, value in columns._declaring_assignments(tree)]


def test_cutting_the_declarations_out_reads_what_parsing_the_whole_files_reads():
    # Every declaring module is read through its cut-out declarations (the fast path), and they parse alike.
    whole = [dumped(ast.parse(path.read_text())) for path in declaring_modules()]
    empty = ast.Module([], [])  # a module whose declarations could not be cut out reads as declaring nothing here
    cut = [dumped(columns._declaration_segments(path.read_text()) or empty) for path in declaring_modules()]
    assert cut == whole and len(harness_declarations()) == sum(map(len, whole))


def test_the_module_that_reads_the_declarations_makes_none():
    assert declarations_in(columns.READER, "harness/columns.py") == []  # it is not read: it must declare nothing


def test_an_unknown_kind_is_refused_naming_the_column():
    with pytest.raises(ValueError, match="column 'wobble' has an unknown kind 'float'"):
        Column("wobble", "float", "a float of some width")


def test_a_column_declared_twice_is_refused_naming_it_and_both_places():
    first = Declaration("harness/a.py (A)", (Column("shared", F64, "one"),))
    second = Declaration("harness/b.py", (Column("other", F64, "two"), Column("shared", F64, "three")))
    with pytest.raises(ValueError, match=r"column 'shared' is declared twice: in harness/a.py \(A\) and in harness/b"):
        assemble([first, second])


def test_a_declaration_may_name_only_column_list_of_and_the_kinds(tmp_path):
    module = tmp_path / "producer.py"
    module.write_text('F32 = "float32"\nCOLUMNS = (Column("x", F32, "a float"),)\n')
    with pytest.raises(ValueError, match=r"producer.py: a column declaration is read from the source.*'F32'"):
        declarations_in(module, "producer.py")


def test_the_schema_id_is_a_fingerprint_of_the_declarations_and_of_nothing_else():
    added = Column("throwaway_reading", F64, "a reading declared since")
    assert schema_id(DECLARED) == SCHEMA_ID
    assert schema_id([*DECLARED, added]) != SCHEMA_ID  # a new column: a new schema, with nothing raised by hand
    first = DECLARED[0]
    for changed in (
        Column(first.name, "int64", first.meaning),  # another kind
        Column(first.name, first.kind, first.meaning + ", now counted otherwise"),  # another meaning
        Column(first.name, first.kind, first.meaning, per_budget=not first.per_budget),
    ):
        assert schema_id([changed, *DECLARED[1:]]) != SCHEMA_ID
    assert schema_id(reversed(DECLARED)) == SCHEMA_ID  # a declaration moved to another module measures nothing new


def import_columns_with(tmp_path: Path, module: str, old: str, new: str) -> subprocess.CompletedProcess:
    """`import harness.columns` from a copy of harness/ in which `module`'s `old` text is replaced by `new`."""
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "harness" / module
    source = path.read_text()
    assert source.count(old) == 1
    path.write_text(source.replace(old, new))
    return subprocess.run(
        [sys.executable, "-c", "import harness.columns"], cwd=tmp_path, capture_output=True, text=True
    )


def test_importing_the_table_fails_on_a_collector_declaring_another_s_column(tmp_path):
    declaration = "    COLUMNS = (\n"
    duplicate = declaration + '        Column("input_rms", F64, "declared again"),\n'
    result = import_columns_with(tmp_path, "instruments/labels.py", declaration, duplicate)
    assert result.returncode != 0
    assert (
        "column 'input_rms' is declared twice: in harness/instruments/labels.py (Labels) and in"
        " harness/instruments/probe.py (Probe)"
    ) in result.stderr


def test_importing_the_table_fails_on_an_unknown_kind_naming_the_column(tmp_path):
    result = import_columns_with(tmp_path, "timing.py", 'Column("copy_share", F64,', 'Column("copy_share", "float",')
    assert result.returncode != 0
    assert "harness/timing.py: column 'copy_share' has an unknown kind 'float'" in result.stderr
