"""The docs' Markdown, read as the tests that check it against the code need it."""

from __future__ import annotations

from pathlib import Path


def table_rows(page: Path, header_start: str) -> list[list[str]]:
    """The rows of the first Markdown table whose header starts with `header_start`."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header_start}"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows
