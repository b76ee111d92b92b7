"""The tests share code one way: through tests/support/. Read from every file under tests/
(ast), so that imports inside functions count as well as those at the top of a module: no
test module imports another test module or a conftest.py (fixtures are shared by pytest,
from the conftest.py files; helpers from tests/support/), a support module imports no test
module and no conftest, and each file outside tests/support/ is a test module, a conftest, a
package's __init__ or a hub's config (jupyterhub_config*.py, data the test hubs load).

    python -m pytest tests/architecture/test_tests_layout.py
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUPPORT = "tests.support"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kind(module: str, path: Path) -> str:
    name = module.rpartition(".")[2]
    if module == SUPPORT or module.startswith(SUPPORT + "."):
        return "support"
    if path.name == "__init__.py":
        return "package"
    if name == "conftest":
        return "conftest"
    if name.startswith("test_"):
        return "test module"
    if name.startswith("jupyterhub_config"):
        return "hub config"
    return "helper"


def import_graph(root: Path) -> dict[str, tuple[Path, set[str]]]:
    """Every module under root/tests → (its file, the modules under tests/ it imports,
    anywhere in its source). `from pkg import name` imports the submodule pkg.name where
    there is one."""
    files = {module_name(path, root): path for path in (root / "tests").rglob("*.py")}
    graph = {}
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.split(".")[0] == "tests"}
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                if source.split(".")[0] != "tests":
                    continue
                for alias in node.names:
                    edges.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in files else source)
        graph[module] = (path, edges)
    return graph


def offences(root: Path) -> list[str]:
    graph = import_graph(root)
    kinds = {module: kind(module, path) for module, (path, _) in graph.items()}
    found = []
    for module, (path, edges) in sorted(graph.items()):
        where = path.relative_to(root)
        if kinds[module] == "helper":
            found.append(f"{where}: a shared helper outside tests/support/")
        for imported in sorted(edges):
            theirs = kinds.get(imported)
            if theirs in ("test module", "conftest", "helper", "hub config"):
                found.append(f"{where} ({kinds[module]}) imports {imported} ({theirs})")
    return found


def test_test_modules_share_code_only_through_support():
    assert offences(REPO) == []
    # the check reads the suite: test modules do import support modules
    graph = import_graph(REPO)
    assert f"{SUPPORT}.clock" in graph["tests.policy.test_policy"][1]
    assert f"{SUPPORT}.live" in graph["tests.conftest"][1]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_itself(tmp_path):
    write(tmp_path, {
        "tests/__init__.py": "",
        "tests/conftest.py": "from .support.live import LAB\n",
        "tests/support/__init__.py": "",
        "tests/support/live.py": "LAB = 1\n",
        "tests/support/traces.py": "def f():\n    from ..a.test_b import Trace\n",
        "tests/support/fakes.py": "from tests import conftest\n",
        "tests/a/__init__.py": "",
        "tests/a/conftest.py": "from ..support import live\n",
        "tests/a/test_b.py": "from ..support.live import LAB\nTrace = LAB\n",
        "tests/a/test_c.py": "from .test_b import Trace\n",
        "tests/a/test_d.py": "def test():\n    from .. import conftest\n",
        "tests/a/test_e.py": "import tests.a.test_b\n",
        "tests/a/test_f.py": "from . import conftest\nfrom .helpers import h\n",
        "tests/a/helpers.py": "h = 1\n",
        "tests/a/jupyterhub_config_a.py": "from tests.a.test_b import Trace\n",
    })
    assert offences(tmp_path) == [
        "tests/a/helpers.py: a shared helper outside tests/support/",
        "tests/a/jupyterhub_config_a.py (hub config) imports tests.a.test_b (test module)",
        "tests/a/test_c.py (test module) imports tests.a.test_b (test module)",
        "tests/a/test_d.py (test module) imports tests.conftest (conftest)",
        "tests/a/test_e.py (test module) imports tests.a.test_b (test module)",
        "tests/a/test_f.py (test module) imports tests.a.conftest (conftest)",
        "tests/a/test_f.py (test module) imports tests.a.helpers (helper)",
        "tests/support/fakes.py (support) imports tests.conftest (conftest)",
        "tests/support/traces.py (support) imports tests.a.test_b (test module)",
    ]


def test_the_order_of_the_passes_names_what_is_there():
    """tests/support/order.py ranks modules by their paths: a slow module moved or renamed
    would drop to the end of make test's passes unnoticed. A package kept together is one
    unit, ranked before the modules not named."""
    from tests.support.order import SLOWEST_FIRST, TOGETHER, rank

    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    for path in SLOWEST_FIRST:
        assert (REPO / path).is_dir() if path.endswith("/") else (REPO / path).is_file(), path
    assert set(TOGETHER) <= set(SLOWEST_FIRST)
    web = rank("tests/web/test_render.py::test_x")
    assert rank("tests/web/test_api.py::test_y[1]") == web == SLOWEST_FIRST.index("tests/web/")
    assert rank(f"{SLOWEST_FIRST[0]}::test_z") == 0 < web < rank("tests/wording/test_wording.py::test_w")
