"""A package's import graph, read from its source (ast) so that imports inside functions and
under TYPE_CHECKING count as well as those at the top of a module, and the circles in it.

Shared by the architecture tests of the product and of the simulator (tests/architecture/).
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name → source file, for every module of the package at `package`."""
    files = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name `path` imports, anywhere in its source."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere in its source. `from pkg import
    submodule` is an import of the submodule, not of the package's __init__."""
    files = module_files(package)

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                submodules = {f"{source}.{a.name}" for a in node.names} & files.keys()
                edges |= submodules
                if len(submodules) < len(node.names):  # names defined in `source` itself
                    edges.add(known(source))
        graph[module] = {e for e in edges if e is not None and e != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen
