"""The one-way flow of docs/architecture.md, read from the code.

harness/ imports neither analysis/ nor the doctor, and analysis/ never imports the doctor: what composes them for
users (the doctor, and doctor/pages.py for the docs) sits above. Every import is read, those inside functions too:
an import deferred to a function is still a dependency.
"""

import ast

import pytest
from conftest import ROOT

BELOW = {"harness": {"analysis", "doctor"}, "analysis": {"doctor"}}


def imported(path) -> set[str]:
    """The top-level packages a module imports (absolute imports; a relative one stays in its own package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(BELOW))
def test_a_lower_layer_never_imports_a_higher_one(package):
    upward = {
        str(path.relative_to(ROOT)): sorted(imported(path) & BELOW[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: names for path, names in upward.items() if names} == {}
