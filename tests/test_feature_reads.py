"""Every feature declares the record columns it reads.

An unknown name fails when the feature is built, and a feature that reads a column it did not declare raises
instead of computing on a silent NaN.
"""

import ast
import inspect
import math

import pytest
from hand_records import record

import analysis.feature
import analysis.loss_curves
import analysis.yardsticks
from analysis.declarations import naive
from analysis.feature import Feature
from analysis.features import FAMILIES, FEATURES_LIST, features

# The declarations (one module per family) and the formulas they call (analysis/feature.py's readers, and the
# formulas of analysis/yardsticks.py and analysis/loss_curves.py), read from their source.
DECLARING = [*FAMILIES, naive]  # every module that declares features
FORMULAS = [analysis.feature, analysis.yardsticks, analysis.loss_curves]
SOURCES = [ast.parse(inspect.getsource(module)) for module in DECLARING + FORMULAS]
FUNCTIONS = {node.name: node for source in SOURCES for node in source.body if isinstance(node, ast.FunctionDef)}


def _columns_named_in(node: ast.AST, seen: set[str]) -> set[str]:
    """Every column named as a literal in `node` (m.get("x"), m["x"], column(m, "x")), through the helpers it calls."""
    named = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            func = child.func
            if isinstance(func, ast.Name) and func.id in ("column", "finite_curve") and len(child.args) > 1:
                named |= {child.args[1].value} if isinstance(child.args[1], ast.Constant) else set()
            if isinstance(func, ast.Attribute) and func.attr == "get" and getattr(func.value, "id", None) == "m":
                named |= {child.args[0].value} if isinstance(child.args[0], ast.Constant) else set()
            if isinstance(func, ast.Name) and func.id in FUNCTIONS and func.id not in seen:
                seen.add(func.id)
                named |= _columns_named_in(FUNCTIONS[func.id], seen)
        if isinstance(child, ast.Subscript) and getattr(child.value, "id", None) == "m":
            named |= {child.slice.value} if isinstance(child.slice, ast.Constant) else set()
    return named


def _computed_from() -> dict[str, set[str]]:
    """Per feature, the columns its code names (read from the declaring modules' source, every branch)."""
    found = {}
    for node in (node for source in SOURCES for node in source.body):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("DECLARED", "NAIVE_FEATURES_LIST"):
            for call in node.value.elts:
                compute = call.args[4]
                start = FUNCTIONS[compute.id] if isinstance(compute, ast.Name) else compute
                found[call.args[0].value] = _columns_named_in(start, {getattr(compute, "id", "")})
    return found


def test_each_feature_declares_exactly_the_columns_its_code_reads():
    computed = _computed_from()
    assert set(computed) == {f.name for f in FEATURES_LIST}
    for feature in FEATURES_LIST:
        assert set(feature.reads) == computed[feature.name], feature.name


def test_an_unknown_column_fails_when_the_feature_is_built_naming_the_nearest():
    with pytest.raises(
        ValueError, match=r"feature lr_peak reads 'lr_peek_share', which is no record column; nearest: "
    ):
        Feature("lr_peak", "the peak", "nothing", False, lambda m: m.get("lr_peek_share"), reads=("lr_peek_share",))


def test_a_column_read_but_not_declared_raises_instead_of_a_silent_nan():
    sloppy = Feature("sloppy", "a share", "nothing", False, lambda m: m.get("lr_peak_share"), reads=("lr_built",))
    with pytest.raises(KeyError, match=r"feature sloppy reads 'lr_peak_share', which it does not declare"):
        sloppy.of(dict(record()))
    declared = Feature(
        "declared", "a share", "nothing", False, lambda m: m.get("lr_peak_share"), reads=("lr_peak_share",)
    )
    assert declared.of(dict(record(lr_peak_share=0.25))) == 0.25


def test_features_on_a_healthy_record_read_only_what_they_declare():
    values = features(dict(record()))
    assert set(values) == {f.name for f in FEATURES_LIST}
    assert math.isclose(values["data_wait_ratio"], 0.05 / 0.95)
