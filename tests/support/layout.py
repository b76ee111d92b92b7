"""How the layout checks (tests/architecture) read a folder of modules."""

from __future__ import annotations

import ast
from pathlib import Path

# a module longer than this holds more than one responsibility: split it along them
MAX_LINES = 500


def root_modules(package: Path) -> list[str]:
    """The modules (.py files, __init__ and __main__ included) at the package's root."""
    return sorted(p.name for p in package.glob("*.py"))


def long_modules(folder: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Each module anywhere under `folder` longer than `limit` lines, with its length."""
    lengths = {str(p.relative_to(folder)): len(p.read_text().splitlines()) for p in folder.rglob("*.py")}
    return {name: n for name, n in lengths.items() if n > limit}


def shared_file_names(folders: list[Path], parallel: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Each module file name used more than once under `folders` (the product's packages) →
    where (relative to each folder's parent), but for the names of `parallel`: the same kind
    of thing in parallel packages."""
    where: dict[str, list[str]] = {}
    for folder in folders:
        for p in sorted(folder.rglob("*.py")):
            where.setdefault(p.name, []).append(str(p.relative_to(folder.parent)))
    return {name: paths for name, paths in where.items() if len(paths) > 1 and name not in parallel}


# the calls of the standard library that make a value of their own name's type
_TYPE_CALLS = frozenset({"timedelta", "datetime", "date", "time", "frozenset", "set", "tuple", "list", "dict",
                         "int", "float", "str", "bytes", "Decimal", "Path"})


def _kind(value: ast.expr) -> str | None:
    """What a constant's value is, as far as its source says: a literal's type, or the class a
    call makes it with (a capitalised name, or one of `_TYPE_CALLS`: `dt.timedelta(...)` and
    `timedelta(...)` are both "timedelta"); None for anything else (a name, an expression, a
    function's result)."""
    if isinstance(value, ast.Constant):
        return type(value.value).__name__
    if isinstance(value, (ast.Tuple, ast.List, ast.Dict, ast.Set)):
        return type(value).__name__.lower()
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name if name in _TYPE_CALLS or name[:1].isupper() else None
    return None


def constant_kinds(folders: list[Path]) -> dict[str, dict[str, list[str]]]:
    """Each module-level constant (an UPPER_CASE name bound to a literal or a call, tuples
    unpacked) that is bound to values of more than one kind under `folders` → kind → the
    modules that bind it so."""
    kinds: dict[str, dict[str, list[str]]] = {}
    for folder in folders:
        for p in sorted(folder.rglob("*.py")):
            for node in ast.parse(p.read_text(), str(p)).body:
                pairs: list[tuple[ast.expr, ast.expr]] = []
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                                and len(target.elts) == len(node.value.elts):
                            pairs += zip(target.elts, node.value.elts, strict=True)
                        else:
                            pairs.append((target, node.value))
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    pairs.append((node.target, node.value))
                for target, value in pairs:
                    kind = _kind(value)
                    if isinstance(target, ast.Name) and target.id.isupper() and kind is not None:
                        kinds.setdefault(target.id, {}).setdefault(kind, []).append(str(p.relative_to(folder.parent)))
    return {name: by_kind for name, by_kind in kinds.items() if len(by_kind) > 1}
