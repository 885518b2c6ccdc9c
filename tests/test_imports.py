"""The package's import structure: no cycles, no other package's private names.

Every ``import`` statement of every module under ``doppler_lab/`` counts, at module level and
inside functions alike (a lazy import is still a dependency: it only hides a cycle until the
function runs). Imports under ``if TYPE_CHECKING:`` never run and do not count. An import of
``pkg.mod`` counts as an edge to ``pkg.mod`` only (the package ``__init__`` is its own node,
reached by ``from pkg import name``).

Cycles are checked twice: between modules, and between the package's parts (each subpackage
such as ``bench`` or ``train`` taken whole, each top-level module on its own), so two
subpackages that import each other through different modules fail too.

A ``_private`` name (or ``_private`` module) belongs to the package that holds it: a module of
that package or of one of its subpackages may import it, any other may not. When two packages
need the same helper it moves below both.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "doppler_lab"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (anywhere, but not under ``if TYPE_CHECKING``)."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """``(target module, imported name or None)`` for each package-internal import of ``name``."""
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] == PACKAGE]
            continue
        if node.level:
            base = here.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] != PACKAGE:
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            # ``from pkg import mod`` imports the submodule mod
            out.append((sub, None) if sub in modules else (target, alias.name))
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its body)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _ in _imports(name, path, modules):
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with each top-level subpackage collapsed into one node."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        out.setdefault(part(a), set()).update(part(b) for b in targets if part(b) != part(a))
    return out


def _package_of(module: str, modules: dict[str, Path]) -> str:
    """The package a module belongs to (a package ``__init__`` belongs to itself)."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def private_imports() -> list[str]:
    """``importer: target`` for each private name or module taken from outside its package."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        mine = _package_of(name, modules)
        for target, attr in _imports(name, path, modules):
            parts = f"{target}.{attr}".split(".") if attr else target.split(".")
            for i, part in enumerate(parts):
                if not part.startswith("_") or part.startswith("__"):
                    continue
                holder = ".".join(parts[:i])
                owner = _package_of(holder, modules) if holder in modules else holder
                if mine != owner and not mine.startswith(owner + "."):
                    bad.append(f"{name}: {'.'.join(parts)}")
                break
    return bad


def test_the_import_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert len(graph) > 50
    # make_backend imports each backend inside the function
    assert f"{PACKAGE}.executor.cpu" in graph[f"{PACKAGE}.executor.factory"]


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
    ],
)
def test_find_cycles(graph: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert find_cycles(graph) == cycles


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (module-level and lazy imports): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_import_cycles_between_subpackages() -> None:
    cycles = find_cycles(part_graph(import_graph()))
    assert not cycles, "subpackages that import each other: " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_private_names_across_packages() -> None:
    bad = private_imports()
    assert not bad, "private names imported from another package: " + ", ".join(bad)
