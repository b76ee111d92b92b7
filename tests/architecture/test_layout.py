"""The product package's layout: its layers are folders (policy/, service/, replay/, web/,
spawner/, signals/, store/), with at most 15 modules left at its root (the entry points and
the shared leaves), and no module longer than 500 lines (a longer one holds more than one
responsibility: split it along them), nor in the tests, benchmarks, scripts and examples.

    python -m pytest tests/architecture/test_layout.py
"""

from __future__ import annotations

from pathlib import Path

import jupyterhub_gpu_reclaim

from ..support.layout import MAX_LINES, long_modules, root_modules

PACKAGE = Path(jupyterhub_gpu_reclaim.__file__).parent
REPO = PACKAGE.parent
MAX_ROOT_MODULES = 15
# the repository's other Python: the tests, the benchmarks, the scripts, the examples and the
# JupyterLab extension's package (the simulator's own check is test_sim_layout.py)
OTHER_FOLDERS = ("tests", "benchmarks", "scripts", "examples", "lab")


def test_at_most_15_modules_at_the_root():
    modules = root_modules(PACKAGE)
    assert {"__init__.py", "cli.py", "launcher.py"} <= set(modules)
    assert len(modules) <= MAX_ROOT_MODULES, modules


def test_no_module_over_500_lines():
    assert long_modules(PACKAGE, MAX_LINES) == {}


def test_no_test_benchmark_or_script_over_500_lines():
    folders = [REPO / name for name in OTHER_FOLDERS]
    assert all(folder.is_dir() for folder in folders)
    assert {f"{folder.name}/{name}": n for folder in folders
            for name, n in long_modules(folder, MAX_LINES).items()} == {}


def test_the_layout_checks_can_fail(tmp_path):
    # the checks themselves: a 16th module at the root is counted, one in a folder is not;
    # a 501-line module anywhere is found, a 500-line one is not
    for i in range(MAX_ROOT_MODULES + 1):
        (tmp_path / f"m{i}.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "sub" / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert len(root_modules(tmp_path)) == MAX_ROOT_MODULES + 1
    assert long_modules(tmp_path, MAX_LINES) == {"sub/inner.py": MAX_LINES + 1}
