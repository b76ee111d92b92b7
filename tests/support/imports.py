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


def _source(here: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from … import` reads, in the package `here`."""
    if not node.level:
        return node.module or ""
    base = here.split(".")[: len(here.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def readers_of(package: Path, name: str, module: str) -> set[str]:
    """The package's modules that read `name` of `module` anywhere in their source: `from
    module import name`, or `module.name` however the module was imported (`import a.module
    [as m]`, `from a import module [as m]`, relative or not)."""
    parent, _, last = module.rpartition(".")
    found = set()
    for importer, path in module_files(package).items():
        here = _package_of(importer, path)
        tree = ast.parse(path.read_text(), str(path))
        bound = set()  # the expressions that name `module` in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {a.asname or module for a in node.names if a.name == module}
            elif isinstance(node, ast.ImportFrom):
                source = _source(here, node)
                if source == module and any(a.name == name for a in node.names):
                    found.add(importer)
                bound |= {a.asname or last for a in node.names if source == parent and a.name == last}
        if any(isinstance(n, ast.Attribute) and n.attr == name and ast.unparse(n.value) in bound
               for n in ast.walk(tree)):
            found.add(importer)
    return found


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
        here = _package_of(module, path)
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                source = _source(here, node)
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
