"""The package's imports run one way. Read from the source (ast.walk over the whole module), so
that imports inside functions and under `if TYPE_CHECKING:` count as well as those at the top
of a module: no import circle anywhere in the package; the layers (folders) import downwards
only: policy/ only the shared leaves; signals/, store/, replay/ never the service, web/ or
the spawner; the pod facts have one home (signals/pod_facts.py); store/ never replay/;
report/ only signals/, policy/ and the leaves; nothing that runs the service imports the
traitlets Application of the settings (it reads it as a ServiceSettings); and the product
never imports the simulator (gpu_reclaim_sim, test and demo infrastructure).

    python -m pytest tests/architecture/test_imports.py
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
from pathlib import Path

import gpu_reclaim_sim
import jupyterhub_gpu_reclaim

from ..support.imports import circles, import_graph, imported_modules, module_files, reachable, readers_of

PACKAGE = Path(jupyterhub_gpu_reclaim.__file__).parent
NAME = PACKAGE.name
SIM = Path(gpu_reclaim_sim.__file__).parent


def modules_under(graph: dict[str, set[str]], *folders: str) -> set[str]:
    """The package's modules in these folders (subpackages), their __init__ included."""
    return {m for m in graph for f in folders if m == f"{NAME}.{f}" or m.startswith(f"{NAME}.{f}.")}


def test_no_import_circle():
    graph = import_graph(PACKAGE)
    assert f"{NAME}.service.cycle" in graph and f"{NAME}.application" in graph
    assert circles(graph) == []


def test_imports_under_type_checking_and_in_functions_count():
    # the check itself: signals.interfaces imports the hub signal's types only under
    # TYPE_CHECKING, and replay.backtest imports the policy only inside a function; both are edges
    graph = import_graph(PACKAGE)
    assert f"{NAME}.signals.hub" in graph[f"{NAME}.signals.interfaces"]
    assert f"{NAME}.policy.step" in graph[f"{NAME}.replay.backtest"]


def test_circles_are_found():
    # the check itself: a circle through a lazy import is one
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_settings_are_a_leaf_and_the_service_never_sees_them():
    """config (the traitlets Application) imports declarations only; the service, its
    signals, actions, store, notices and web pages never import the Application: the
    launcher hands it to them as the read-only settings.ServiceSettings it is, which they read."""
    graph = import_graph(PACKAGE)
    settings = {f"{NAME}.application", f"{NAME}.launcher"}
    assert not reachable(graph, f"{NAME}.application") & (settings | {f"{NAME}.service.cycle"} | modules_under(graph, "web"))
    # the declarations (settings/) are below what reads them
    declarations = modules_under(graph, "settings")
    assert {f"{NAME}.settings.service_options", f"{NAME}.settings.gpu_policy"} <= declarations
    for declared in sorted(declarations):
        assert not reachable(graph, declared) & (settings | modules_under(graph, "service", "web")), declared
    assert f"{NAME}.settings.service_options" in graph[f"{NAME}.service.cycle"] and f"{NAME}.settings.service_options" in graph[f"{NAME}.web.base"]
    workers = modules_under(graph, "service", "signals", "store", "web", "replay", "policy") | {f"{NAME}.timestamps"}
    assert {f"{NAME}.service.cycle", f"{NAME}.service.hub_stopper", f"{NAME}.web.app"} <= workers
    for worker in sorted(workers):
        assert not reachable(graph, worker) & settings, worker


def test_the_layers_import_downwards():
    """policy/ (pure: no I/O) imports only the shared leaves at the package's root; the
    signals, the store and the replays never import the service, the web pages or the
    spawner; the service never imports web/ or the spawner."""
    graph = import_graph(PACKAGE)
    leaves = {f"{NAME}.{m}" for m in ("durations", "errors", "timestamps", "oneline", "wording")}
    policy = modules_under(graph, "policy")
    assert f"{NAME}.policy.decider" in policy
    for module in sorted(policy):
        assert reachable(graph, module) <= policy | leaves, module
    upper = modules_under(graph, "service", "web", "spawner") | {f"{NAME}.launcher", f"{NAME}.cli"}
    for module in sorted(modules_under(graph, "signals", "store", "replay")):
        assert not reachable(graph, module) & upper, module
    for module in sorted(modules_under(graph, "service")):
        assert not reachable(graph, module) & modules_under(graph, "web", "spawner"), module
    # the check itself: the service does import the policy, the signals and the store
    assert {f"{NAME}.policy.decider", f"{NAME}.signals.hub", f"{NAME}.store"} <= reachable(graph, f"{NAME}.service.cycle")


def test_one_session_step_for_the_cycle_and_the_replays():
    """The per-session loop (decide, drop the warnings the decision cleared, add its own) is
    `policy.step`'s alone: nothing outside policy/ calls `decide` itself, however it imports it."""
    policy = modules_under(import_graph(PACKAGE), "policy")
    deciders = readers_of(PACKAGE, "decide", f"{NAME}.policy.decider")
    assert f"{NAME}.policy.step" in deciders  # the check sees it
    assert not deciders - policy, sorted(deciders - policy)
    steppers = readers_of(PACKAGE, "step", f"{NAME}.policy.step")
    assert {f"{NAME}.service.cycle", f"{NAME}.replay.backtest"} <= steppers, steppers


def test_a_read_of_a_name_is_seen_however_its_module_is_imported(tmp_path):
    # the check itself, on a package of its own: each way of reaching `decide` is a read of it
    pkg = tmp_path / "pkg"
    (pkg / "policy").mkdir(parents=True)
    (pkg / "service").mkdir()
    for init in (pkg, pkg / "policy", pkg / "service"):
        (init / "__init__.py").write_text("")
    (pkg / "policy" / "decider.py").write_text("IDLE = 1\ndef decide(): pass\n")
    sources = {
        "plain": "import pkg.policy.decider\npkg.policy.decider.decide()\n",
        "alias": "import pkg.policy.decider as d\nd.decide()\n",
        "module": "from ..policy import decider\ndecider.decide()\n",
        "module_alias": "from pkg.policy import decider as dd\n\ndef f():\n    return dd.decide\n",
        "name": "from ..policy.decider import IDLE, decide\n",
        "other_name": "from ..policy.decider import IDLE\nimport pkg.policy.decider as d\nd.IDLE\n",
        "unrelated": "import json as d\nd.decide = 1\n",
    }
    for module, source in sources.items():
        (pkg / "service" / f"{module}.py").write_text(source)
    assert readers_of(pkg, "decide", "pkg.policy.decider") == {
        f"pkg.service.{m}" for m in ("plain", "alias", "module", "module_alias", "name")}


def test_the_pod_facts_have_one_home():
    """A pod's GPUs, whether it waits for one and since when, its profile and keep-alive are
    read by signals/pod_facts.py alone, for the service's pods signal and the spawner alike:
    pure, it imports only the Kubernetes semantics (signals/kube.py), the checks of an
    untrusted entry (signals/http_source.py) and the shared leaves; the spawner never imports the
    service's pod watch (signals/pods.py); and the names those facts are read by (the GPU
    resources, the annotations, the scheduler's reason) are written nowhere else."""
    graph = import_graph(PACKAGE)
    facts = f"{NAME}.signals.pod_facts"
    leaves = {f"{NAME}.{m}" for m in ("durations", "errors", "timestamps", "oneline", "wording")}
    assert reachable(graph, facts) <= {f"{NAME}.signals.kube", f"{NAME}.signals.http_source"} | leaves
    assert facts in graph[f"{NAME}.signals.pods"] and facts in graph[f"{NAME}.spawner.messages"]
    for module in sorted(modules_under(graph, "spawner")):
        assert f"{NAME}.signals.pods" not in reachable(graph, module), module
    names = {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-", "nvidia.com/gpu.product",
             "jupyterhub-gpu-reclaim/keepalive-until", "jupyterhub-gpu-reclaim/profile", "Unschedulable",
             "hub.jupyter.org/username", "hub.jupyter.org/servername"}
    written = {(module, node.value) for module, path in module_files(PACKAGE).items()
               for node in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(node, ast.Constant) and node.value in names}
    assert written == {(facts, name) for name in names}


#: a GPU resource or label as code names it: Kubernetes' spelling as a whole string
#: ("nvidia.com/mig-1g.5gb"), or Prometheus' (kube-state-metrics': "nvidia_com_gpu") anywhere
#: in one, an f-string's parts included; prose (help, messages) may mention them
_KUBERNETES_NAME = re.compile(r"nvidia\.com/\S+")
_PROMETHEUS_NAME = re.compile(r"nvidia_com_", re.IGNORECASE)


def gpu_names_outside(package: Path, home: str) -> set[tuple[str, str]]:
    """(module, string) of each GPU resource or label name written outside the module `home`."""
    found = set()
    for module, path in module_files(package).items():
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        found |= {(module, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and (_KUBERNETES_NAME.fullmatch(node.value) or _PROMETHEUS_NAME.search(node.value))}
    return {(module, value) for module, value in found if module != home}


def test_what_a_gpu_is_is_decided_by_the_pod_facts_alone():
    """Which resources are GPUs is pod_facts' (`is_gpu_resource`): no other module names one,
    in Kubernetes' spelling or in Prometheus' (the usage report asks pod_facts for the pattern)."""
    assert gpu_names_outside(PACKAGE, f"{NAME}.signals.pod_facts") == set()


def test_gpu_names_are_found_in_either_spelling(tmp_path):
    # the check itself, on a package of its own
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "facts.py").write_text('GPU = "nvidia.com/gpu"\n')
    (pkg / "report.py").write_text(
        '"""Counts nvidia.com/gpu and nvidia_com_gpu (a docstring says so)."""\n'
        'Q = \'requests{resource=~"nvidia_com_.+"}\'\n'
        'def mig(p):\n    return f"NVIDIA_COM_MIG_{p}"\n'
        'HELP = "waiting for nvidia.com/gpu"\nMIG = "nvidia.com/mig-1g.5gb"\n')
    assert gpu_names_outside(pkg, "pkg.facts") == {
        ("pkg.report", 'requests{resource=~"nvidia_com_.+"}'), ("pkg.report", "NVIDIA_COM_MIG_"),
        ("pkg.report", "nvidia.com/mig-1g.5gb")}
    assert ("pkg.facts", "nvidia.com/gpu") in gpu_names_outside(pkg, "pkg.other")


def test_the_store_never_imports_the_replays():
    """The store keeps typed rows, never the trace format: the replays (`backtest
    --from-store`, the what-if, the trace export) read the store, and the service's memory
    after a restart reads its rows directly, so the store sits below replay/."""
    graph = import_graph(PACKAGE)
    replay = modules_under(graph, "replay")
    assert f"{NAME}.replay.trace" in replay
    for module in sorted(modules_under(graph, "store")):
        assert not reachable(graph, module) & replay, module
    assert not reachable(graph, f"{NAME}.service.sample_history") & replay
    # the check itself: the trace export does read the store
    assert f"{NAME}.store" in reachable(graph, f"{NAME}.replay.trace_export")


def test_the_report_imports_only_the_signals_and_the_policy():
    """report/ (the usage report from Prometheus's history) sits above the signals and the
    policy and reads through them: it imports those layers and the shared leaves only, never
    the service, the store, the replays, the web pages, the spawner or the settings; and only
    the command line and the admin page's report (web/, and the record's figures in
    service/recorded_usage.py) import it."""
    graph = import_graph(PACKAGE)
    leaves = {f"{NAME}.{m}" for m in ("durations", "errors", "timestamps", "oneline", "wording")}
    report = modules_under(graph, "report")
    assert f"{NAME}.report.timelines" in report
    allowed = report | modules_under(graph, "signals", "policy") | leaves
    for module in sorted(report):
        assert reachable(graph, module) <= allowed, (module, sorted(reachable(graph, module) - allowed))
    # the check itself: the report does read through gpu_readings and the policy's settings
    assert {f"{NAME}.signals.gpu_readings", f"{NAME}.policy.config"} <= reachable(graph, f"{NAME}.report.run")
    importers = {m for m, edges in graph.items() if edges & report} - report
    assert {f"{NAME}.cli", f"{NAME}.web.usage_report"} <= importers, importers
    assert importers <= {f"{NAME}.cli", f"{NAME}.service.recorded_usage"} | modules_under(graph, "web"), importers


def test_the_cycle_never_imports_the_web_pages():
    """The status the pages show is published by the cycle (service/status.py) and read by
    web/; the changes users make go through web/controls into the store and the stops: the
    cycle itself never imports web/."""
    graph = import_graph(PACKAGE)
    web = modules_under(graph, "web")
    assert f"{NAME}.web.controls" in web
    for module in sorted(modules_under(graph, "service") | {f"{NAME}.replay.trace_export", f"{NAME}.wording"}):
        assert not reachable(graph, module) & web, module


def test_the_product_never_imports_the_simulator():
    """The simulator's demo hub config imports the product (test_sim_layout.py), never the
    other way round: `pip install jupyterhub-gpu-reclaim` runs without it."""
    sim = gpu_reclaim_sim.__name__
    offenders = {module: sorted(name for name in imported_modules(path)
                                if name == sim or name.startswith(f"{sim}."))
                 for module, path in module_files(PACKAGE).items()}
    assert {module: names for module, names in offenders.items() if names} == {}
    # the check itself: the simulator's demo hub config does import the product
    assert NAME in {name.partition(".")[0] for name in imported_modules(SIM / "demo_config" / "jupyterhub_config.py")}


def requirement_names(lines: str) -> set[str]:
    """The distribution names of setup.cfg requirement lines, normalized (PEP 503)."""
    names = set()
    for line in lines.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            names.add(re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9._-]+)", line)[1]).lower())
    return names


def test_the_product_needs_no_simulator_dependency():
    """The `sim` extra's dependencies are not the product's: `pip install .` leaves them out,
    and no module of the product imports one (the simulator's own modules do)."""
    setup = configparser.ConfigParser()
    setup.read(PACKAGE.parent / "setup.cfg")
    sim_only = requirement_names(setup["options.extras_require"]["sim"])
    assert {"jsonschema", "cryptography"} <= sim_only
    assert not sim_only & requirement_names(setup["options"]["install_requires"])
    by_module = importlib.metadata.packages_distributions()
    modules = {module for module, dists in by_module.items()
               if {re.sub(r"[-_.]+", "-", d).lower() for d in dists} & sim_only}
    assert {"jsonschema", "cryptography"} <= modules
    imports = {module: {name.partition(".")[0] for name in imported_modules(path)} & modules
               for module, path in module_files(PACKAGE).items()}
    assert {module: names for module, names in imports.items() if names} == {}
    # the check itself: the simulator imports them
    assert {"jsonschema", "cryptography"} <= {
        name.partition(".")[0] for path in SIM.rglob("*.py") for name in imported_modules(path)}
