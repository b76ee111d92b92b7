"""A decision's facts are typed fields (policy/evidence.py): its evidence is their display,
written by `Decision.shown()`, and nothing reads a fact back from it. Read from the source
(ast, and the page templates as text): outside policy/evidence.py (the writer, and the one
reader of a stored reclaim's evidence), no module of the product or of its JupyterLab
extension subscripts an evidence, calls `.get` on one, or reads a `.shown()` by key.

    python -m pytest tests/architecture/test_typed_decisions.py
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupyterhub_gpu_reclaim
import jupyterhub_gpu_reclaim_lab

from ..support.imports import module_files

PACKAGE = Path(jupyterhub_gpu_reclaim.__file__).parent
LAB = Path(jupyterhub_gpu_reclaim_lab.__file__).parent
DISPLAY = f"{PACKAGE.name}.policy.evidence"
# a template reading a field of an evidence (`s.evidence.idle_since`, `s.evidence["x"]`);
# showing the whole of it (`s.evidence | tojson`) is display
_TEMPLATE_READ = re.compile(r"\bevidence\s*(?:\.\s*\w|\[)")


def _is_evidence(node: ast.expr) -> bool:
    """An evidence: a name `evidence` or `ev` (or `…_evidence`), an attribute `evidence`,
    `x["evidence"]`, `x.get("evidence")`, or a decision's `shown()`."""
    if isinstance(node, ast.Name):
        return node.id in ("evidence", "ev") or node.id.endswith("_evidence")
    if isinstance(node, ast.Attribute):
        return node.attr == "evidence" or node.attr.endswith("_evidence")
    if isinstance(node, ast.BoolOp):  # (x.evidence or {})
        return any(_is_evidence(v) for v in node.values)
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "evidence"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "shown" and not node.args:
            return True
        return (node.func.attr == "get" and bool(node.args) and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "evidence")
    return False


def evidence_reads(package: Path, allowed: set[str] = frozenset()) -> list[str]:
    """`module:line` of each line that reads a fact from an evidence, outside the modules `allowed`."""
    found = []
    for module, path in sorted(module_files(package).items()):
        if module in allowed:
            continue
        lines = sorted({node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
                        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                            and _is_evidence(node.value))
                        or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and node.func.attr == "get" and _is_evidence(node.func.value))})
        found += [f"{module}:{n}" for n in lines]
    return found


def template_reads(folder: Path) -> list[str]:
    return [f"{path.name}:{text[:m.start()].count(chr(10)) + 1}" for path in sorted(folder.rglob("*.html"))
            for text in [path.read_text()] for m in _TEMPLATE_READ.finditer(text)]


def test_nothing_reads_a_fact_back_from_an_evidence():
    assert evidence_reads(PACKAGE, {DISPLAY}) == []
    assert evidence_reads(LAB) == []  # it reads the API's typed fields (idle_since)
    assert DISPLAY in module_files(PACKAGE)


def test_no_template_reads_a_fact_back_from_an_evidence():
    folders = [PACKAGE / "web" / "templates", PACKAGE / "hub_templates"]
    assert all(f.is_dir() for f in folders)
    assert [read for f in folders for read in template_reads(f)] == []
    # the pages do show it, whole
    assert "evidence | tojson" in (PACKAGE / "web" / "templates" / "admin.html").read_text()


def test_reads_of_an_evidence_are_found(tmp_path):
    # the check itself, on a package of its own: each way of reading a fact back is found,
    # writing an evidence or showing it whole is not
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "display.py").write_text("def read(evidence):\n    return evidence.get('x')\n")
    (pkg / "reader.py").write_text(
        "def f(d, r, own, stored_evidence):\n"
        "    a = d.evidence['idle_since']\n"
        "    b = (r.evidence or {}).get('by')\n"
        "    c = d.shown()['reclaim_at']\n"
        "    e = (own.get('evidence') or {}).get('idle_since')\n"
        "    g = own['evidence']['x']\n"
        "    h = stored_evidence.get('y')\n"
        "    ev = d.evidence\n"
        "    return a, b, c, e, g, h, ev['z']\n")
    (pkg / "writer.py").write_text(
        "import json\n"
        "def f(d, out):\n"
        "    out['evidence'] = d.shown()\n"
        "    json.dumps(d.evidence)\n"
        "    return {'evidence': dict(d.evidence)}, d.shown().items()\n")
    assert evidence_reads(pkg, {"pkg.display"}) == [f"pkg.reader:{n}" for n in (2, 3, 4, 5, 6, 7, 9)]
    assert evidence_reads(pkg) == ["pkg.display:2"] + [f"pkg.reader:{n}" for n in (2, 3, 4, 5, 6, 7, 9)]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "page.html").write_text(
        "<pre>{{ s.evidence | tojson }}</pre>\n{% if s.evidence.idle_since %}\n{{ s.evidence['x'] }}\n")
    assert template_reads(tmp_path / "t") == ["page.html:2", "page.html:3"]
