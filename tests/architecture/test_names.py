"""One name for one thing: no two of the product's modules (the service's package and the
JupyterLab extension's) share a file name unless they are the same kind of thing in parallel
packages (`PARALLEL`, said in docs/architecture.md), and a module-level constant of one name
is bound to values of one type wherever it is declared (read from the source: literals and
the classes a call makes).

    python -m pytest tests/architecture/test_names.py
"""

from __future__ import annotations

from pathlib import Path

import jupyterhub_gpu_reclaim
import jupyterhub_gpu_reclaim_lab

from ..support.layout import constant_kinds, shared_file_names

PRODUCT = [Path(jupyterhub_gpu_reclaim.__file__).parent, Path(jupyterhub_gpu_reclaim_lab.__file__).parent]
# the same kind of thing in parallel packages: each package's own front page
PARALLEL = frozenset({"__init__.py"})


def test_no_two_product_modules_share_a_file_name():
    assert all(folder.is_dir() for folder in PRODUCT)
    assert shared_file_names(PRODUCT, PARALLEL) == {}


def test_a_constant_has_one_type():
    assert constant_kinds(PRODUCT) == {}


def test_a_shared_file_name_is_found(tmp_path):
    # the check itself, on packages of their own: a name used in two folders (of one package
    # or two) is found, one of the parallel kinds is not, nor a name used once
    for module in ("a/history.py", "a/store/history.py", "a/store/__init__.py", "a/__init__.py",
                   "b/__init__.py", "b/web/base.py", "b/report/base.py", "b/report/timelines.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    assert shared_file_names([tmp_path / "a", tmp_path / "b"], PARALLEL) == {
        "history.py": ["a/history.py", "a/store/history.py"], "base.py": ["b/report/base.py", "b/web/base.py"]}
    assert "__init__.py" in shared_file_names([tmp_path / "a", tmp_path / "b"])


def test_a_constant_of_two_types_is_found(tmp_path):
    # the check itself: DAY a timedelta here and seconds there is found, however it is bound
    # (a call through a module, a tuple unpacked, annotated); one type in two modules is not,
    # nor a value the source does not type (a name, a function's result), nor a lower-case name
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "usage.py").write_text("import datetime as dt\nDAY = dt.timedelta(days=1)\nHOUR = 3600\n"
                                  "LIMIT = compute()\nname = 'x'\n")
    (pkg / "run.py").write_text("DAY_S, DAY = 86400, 86400\nHOUR: int = 60 * 60\nLIMIT = 5\nname = 5\n")
    (pkg / "chart.py").write_text("from datetime import timedelta\nDAY = timedelta(hours=24)\nHOUR = 3600\n")
    assert constant_kinds([pkg]) == {"DAY": {"timedelta": ["pkg/chart.py", "pkg/usage.py"], "int": ["pkg/run.py"]}}
