"""The record's columns, assembled from the declarations of the modules that produce them.

Every column is declared once, as a `Column` (harness/column.py: name, kind, meaning, whether each step budget
keeps it), by the module that produces it: each collector of harness/instruments/ in its class attribute `COLUMNS`;
harness/cell.py the cell's identity, run and data sizes; harness/reference.py, harness/timing.py and
harness/instruments/memorization.py their end-of-run measurements; harness/after_training.py the class count, the
uninformed loss and the final scores, which it sets for both harness/cell.py and the doctor (doctor/core.py).

The declarations are read from the modules' source, not imported: importing a collector imports torch, and the
sweep's own process, which compares every record folder it scans with the schema, never imports torch
(harness/sweep.py); nor may `import doctor` load pyarrow. So each `COLUMNS` or `<WHAT>_COLUMNS` tuple of `Column(...)`
in harness/**/*.py is cut out of its file's text, parsed with `ast` and evaluated alone (a few milliseconds; a file
whose declarations are not laid out as ruff formats them is parsed whole), which is why a declaration may use only
`Column`, `list_of` and the kinds. A module that declares a column twice, an unknown kind or two modules
declaring one name fail here, at import, naming the column.

harness/records.py turns the table into the pyarrow schema; analysis/docs.py into docs/records.md; the rules'
features (analysis/features.py) read NAMES and CHECKPOINT_COLUMNS. Bump harness.records.SCHEMA_VERSION whenever a
column changes meaning or kind.
"""

import ast
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

from harness.column import BOOL, F64, I32, I64, KINDS, STR, TIMESTAMP, Column, list_of

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


def _names(text: str) -> list[str]:
    """The names in a text that lists them separated by spaces and line ends (a list too long for a line each)."""
    return text.split()


# The order schema 15 wrote its columns, and its checkpoints' fields, in. It cannot be derived from the declarations:
# it groups by meaning across producers (the problem, `first_loss`, then the census, update ratios and the census's
# depth ratio again, ...), and a snapshot's fields follow yet another order. It must not change within a schema
# version: a records folder is checked file by file against the whole schema, order included
# (harness/records.py: `scan_folder`), so reordering would turn every stored record into one of "other schema".
# A column declared since goes after these, in the order of the declarations; when SCHEMA_VERSION is next raised,
# these lists may go, and the order become that of the declarations.
ORDER_OF_SCHEMA_15 = _names(
    """
    cell_id fault faults diagnosis verdicts severity dataset model seed device status error schema_version started_at
    wall_s torch_version python_version host device_name threads config_yaml n_classes n_train n_val steps task
    output_layer loss_kind first_loss ln_classes memorize_rates memorize_losses memorize_best_loss memorize_best_rate
    capacity_score capacity_baseline capacity_rate capacity_examples census_steps param_names grad_norm grad_max
    grad_zero_share grad_missing grad_norm_curve grad_zero_share_total params_without_grad params_without_grad_share
    accumulation_ratio accumulation_ratio_curve backwards_per_step optimizer_steps grad_carried_share grad_kept_at_step
    clipped_step_share lr_built lr_peak_share lr_last_share lr_decayed_share amp_scale_min amp_scale_last
    amp_skipped_share update_ratio update_ratio_median update_ratio_curve update_ratio_peak weight_norm_ratio
    unmoved_share grad_depth_ratio_init grad_depth_ratio dead_unit_share_init dead_unit_share dead_unit_share_layers
    saturated_share_init saturated_share activation_growth_init input_rms label_imbalance batch_label_mix majority_share
    targets_changed_share output_prob_share output_spread target_reach_gap logit_reach_span confident_disagreement
    confident_disagreement_peak train_in_eval_share eval_in_train_share data_wait_s loop_s data_wait_share step_time_s
    copy_share gpu_busy_share peak_memory_bytes train_loss_curve nonfinite_losses loss_spikes loss_spike_steps
    loss_spike_period periodic_spikes val_steps val_loss_curve val_acc_curve final_train_loss final_train_acc
    final_val_loss final_val_acc baseline_val_acc reference_val_acc reference_train_acc reference_linear_val_acc
    reference_loo_acc reference_knn_val_acc prior_shift reference_examples reference_val_examples data_curve_examples
    data_curve_val_acc
    """
)
CHECKPOINT_ORDER_OF_SCHEMA_15 = _names(
    """
    steps first_loss nonfinite_losses grad_zero_share_total params_without_grad params_without_grad_share
    accumulation_ratio backwards_per_step optimizer_steps grad_carried_share grad_kept_at_step clipped_step_share
    lr_built lr_peak_share lr_last_share lr_decayed_share amp_scale_min amp_scale_last amp_skipped_share
    update_ratio_median update_ratio_peak weight_norm_ratio unmoved_share grad_depth_ratio_init grad_depth_ratio
    dead_unit_share_init dead_unit_share saturated_share_init saturated_share activation_growth_init input_rms
    label_imbalance batch_label_mix majority_share targets_changed_share output_prob_share output_spread
    target_reach_gap logit_reach_span confident_disagreement confident_disagreement_peak train_in_eval_share
    eval_in_train_share loss_spikes loss_spike_period periodic_spikes data_wait_s loop_s data_wait_share
    final_train_loss final_train_acc final_val_loss final_val_acc
    """
)

# All a declaration may name: it is evaluated without its module's imports.
_DECLARATION_NAMES = {"Column": Column, "list_of": list_of, "F64": F64, "I64": I64, "I32": I32, "STR": STR}
_DECLARATION_NAMES |= {"BOOL": BOOL, "TIMESTAMP": TIMESTAMP}


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
    """Every declaration in harness/**/*.py, file by file in path order, each file's in its own order."""
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
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


def in_order(names: list[str], first: list[str], order: str) -> list[str]:
    """`names` with those in `first` first, in its order (`order` names that list), then the others as they come."""
    strangers = [name for name in first if name not in names]
    if strangers:
        raise ValueError(f"{order} names {strangers}, not among the columns declared for it")
    placed = set(first)
    return [*first, *(name for name in names if name not in placed)]


_TABLE = assemble(harness_declarations())
_RECORD_ORDER = in_order(list(_TABLE), ORDER_OF_SCHEMA_15, "ORDER_OF_SCHEMA_15")
DECLARED: list[Column] = [_TABLE[name][0] for name in _RECORD_ORDER]  # every column, in the record's order
DECLARED_IN: dict[str, str] = {name: _TABLE[name][1] for name in _RECORD_ORDER}
COLUMNS: list[tuple[str, str, str]] = [(column.name, column.kind, column.meaning) for column in DECLARED]
NAMES = {column.name for column in DECLARED}
# The measurements that move as a run goes on (declared per_budget), taken again at every step budget (loop.budgets)
# as if the run had stopped there; the record's own columns of these names are the snapshot at the run's end.
CHECKPOINT_COLUMNS = in_order(
    [column.name for column in DECLARED if column.per_budget],
    CHECKPOINT_ORDER_OF_SCHEMA_15,
    "CHECKPOINT_ORDER_OF_SCHEMA_15",
)
