"""The one-way flow of docs/architecture.md and the house's sizes, read from the code.

harness/ imports neither analysis/ nor the doctor, and analysis/ never imports the doctor: what composes them for
users (the doctor, and doctor/pages.py for the docs) sits above. No module imports itself through others (an import
circle), no module is over 500 lines and no function over 60, so that each reads top to bottom. Every import is
read, those inside functions and under `if TYPE_CHECKING:` too: an import deferred is still a dependency.
"""

import ast

import pytest
from conftest import ROOT

PACKAGES = ("harness", "analysis", "doctor")
MODULE_LINES, FUNCTION_LINES = 500, 60
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


def modules() -> dict[str, object]:
    """Every module of the packages by dotted name (a package by its own name), with its path."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def module_imports(name: str, path, known: dict) -> set[str]:
    """The modules of the packages that a module imports: `from a import b` is module a.b where that is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    found = set()
    for target in targets:
        while target and target not in known:  # a name inside a module: the module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter[0]
                    counter[0] += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    known = modules()
    graph = {name: module_imports(name, path, known) for name, path in known.items()}
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():  # so that the test above can fail
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_500_lines():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules().values()}
    assert {path: lines for path, lines in sizes.items() if lines > MODULE_LINES} == {}


def test_no_function_is_over_60_lines():
    long = {}
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}
