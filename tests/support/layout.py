"""How the layout checks (tests/architecture) read a folder of modules."""

from __future__ import annotations

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
