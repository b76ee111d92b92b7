"""The simulator's layout (gpu_reclaim_sim/): folders as a real cluster's components, no
import circle (imports inside functions and under TYPE_CHECKING count), at most 20 modules
at the package's root, none over 500 lines, and no Kubernetes semantics taken from the
product it runs: it imports jupyterhub_gpu_reclaim only in the demo hub's config, which
configures the product under test. Read from the source (ast).

    python -m pytest tests/architecture/test_sim_layout.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_reclaim_sim
import jupyterhub_gpu_reclaim

from ..support.imports import circles, import_graph, imported_modules
from ..support.layout import MAX_LINES, long_modules, root_modules

SIM = Path(gpu_reclaim_sim.__file__).parent
PRODUCT = jupyterhub_gpu_reclaim.__name__
MAX_ROOT_MODULES = 20
# the one file that may import the product: the demo hub's JupyterHub config, which sets up
# the product under test (its spawner, its service, its templates); never Kubernetes semantics
MAY_IMPORT_THE_PRODUCT = {SIM / "demo_config" / "jupyterhub_config.py"}


def product_references(path: Path) -> set[str]:
    """The product's modules `path` imports, or names in a string (`importlib`, `-m`)."""
    names = {n for n in imported_modules(path) if n.partition(".")[0] == PRODUCT}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        # the package's name, not a prefix: jupyterhub_gpu_reclaim_lab (the user image's
        # distribution, which the demo checks is installed) is not the product
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.partition(".")[0] == PRODUCT:
            names.add(node.value)
    return names


def test_no_import_circle_in_the_simulator():
    graph = import_graph(SIM)
    assert "gpu_reclaim_sim.kubelet.podworker" in graph and "gpu_reclaim_sim.gpu.dcgm_exporter" in graph
    assert circles(graph) == []


def test_circles_are_found_in_a_package(tmp_path):
    # the check itself: a circle through a TYPE_CHECKING import and one inside a function are circles
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.b import B\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert circles(import_graph(pkg)) == [["pkg.a", "pkg.sub.b"]]


def test_at_most_twenty_modules_at_the_simulators_root():
    modules = root_modules(SIM)
    # the check itself: the listing sees the root's modules and not those in its folders
    assert {"__init__.py", "cli.py", "cluster.py"} <= set(modules) and "scheduler.py" not in modules
    assert len(modules) <= MAX_ROOT_MODULES, modules


def test_no_simulator_module_over_500_lines(tmp_path):
    assert long_modules(SIM, MAX_LINES) == {}
    # the check itself: a long module in a folder is found
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path, MAX_LINES) == {"deep/long.py": MAX_LINES + 1}


def test_the_simulator_takes_no_kubernetes_semantics_from_the_product():
    """Its quantities, taints, node affinity, requests, image names and times are its own
    (gpu_reclaim_sim/api/, tested against Kubernetes' documentation in
    tests/sim/test_kubernetes_semantics.py): the product is tested against them."""
    offenders = {str(p.relative_to(SIM)): sorted(names) for p in SIM.rglob("*.py")
                 if p not in MAY_IMPORT_THE_PRODUCT and (names := product_references(p))}
    assert offenders == {}
    # the check itself: the demo hub's config does import the product, and is found to
    for path in MAY_IMPORT_THE_PRODUCT:
        assert f"{PRODUCT}.spawner.probe_tokens" in product_references(path)


def _folder(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between the simulator's top-level folders (a module at its root counts as
    a folder of its own): `kubelet` imports `network` when any module of one imports one of
    the other."""
    out: dict[str, set[str]] = {}
    for module, imports in graph.items():
        out.setdefault(_folder(module), set()).update(_folder(m) for m in imports if _folder(m) != _folder(module))
    return out


def knot_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Each import (module → module, the package's name left out) between two folders of
    one import circle of folders (`folder_graph`): each of them adds to a loop."""
    circle_of = {f: i for i, circle in enumerate(circles(folder_graph(graph))) for f in circle}
    return {(m.partition(".")[2], n.partition(".")[2]) for m, imports in graph.items() for n in imports
            if _folder(m) != _folder(n) and _folder(m) in circle_of and circle_of.get(_folder(n)) == circle_of[_folder(m)]}


def test_no_import_circle_between_the_simulators_folders():
    """Folders, not only modules: the node agent, the kubelet's parts, the network, the GPUs
    and the scenario (a root module is a folder of its own) import each other one way only."""
    graph = import_graph(SIM)
    assert {"nodeagent", "kubelet", "network", "gpu", "scenario"} <= set(folder_graph(graph))
    assert circles(folder_graph(graph)) == [] and knot_imports(graph) == set(), sorted(knot_imports(graph))


def test_an_import_adding_to_a_loop_of_folders_is_found(tmp_path):
    # the check itself: a second import along a loop's folders is found, as is the first one
    # closing a loop; an import in one direction only is not
    pkg = tmp_path / "pkg"
    for folder in ("a", "b", "c"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from ..b import y\n")
    (pkg / "b" / "y.py").write_text("def f():\n    import pkg.a.z as z\n")
    (pkg / "a" / "z.py").write_text("")
    (pkg / "a" / "w.py").write_text("from ..b.y import f\n")  # a second import along the loop
    (pkg / "c" / "v.py").write_text("from ..a import x\n")  # into the loop, not back
    assert knot_imports(import_graph(pkg)) == {("a.x", "b.y"), ("b.y", "a.z"), ("a.w", "b.y")}


def test_no_control_plane_of_its_own():
    """kube-apiserver, etcd, kube-scheduler and kube-controller-manager are the real ones
    (controlplane/ starts them): no folder or module of the simulator is one of them again."""
    names = {p.relative_to(SIM).parts[0].removesuffix(".py") for p in SIM.rglob("*.py")}
    assert "controlplane" in names and "nodeagent" in names
    assert not names & {"apiserver", "admission", "rbac", "scheduler", "controllers", "store"}, sorted(names)


def test_the_simulators_modules_have_names_of_their_own():
    """No two modules of the simulator share a file name: one name, one thing."""
    seen: dict[str, list[str]] = {}
    for p in SIM.rglob("*.py"):
        if p.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(p.name, []).append(str(p.relative_to(SIM)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
