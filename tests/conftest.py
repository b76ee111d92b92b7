"""Fixtures that start the real things: the simulated cluster, JupyterHub with
configurable-http-proxy and the unmodified KubeSpawner, and single-user servers.

The tests' hubs run from this Python's environment (JupyterHub 6), or from the one
`--hub-python` names: `make test` runs the hub-facing tests again with `.venv-jh5`, the
z2jh chart's hub image (JupyterHub 5.5). A test that makes sense on one major only is
marked `@pytest.mark.jupyterhub(MAJOR, reason=...)`: the other major's pass deselects it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import pytest_asyncio

from gpu_reclaim_sim.network import namespace
from gpu_reclaim_sim.paths import REPO

from .support import live, order
from .support.browser import CHROMIUM, CHROMIUM_ARGS
from .support.controlplane import control_plane  # noqa: F401 (the worker's, for every module)
from .support.live import api_fixture, hub_fixture, hub_major, sim_fixture

# the suite's kinds (docs/architecture.md#the-tests), from a test's folder and its
# `integration` mark; `-m unit`, `-m hub`, `-m release` or `-m sim` selects one
KINDS = {
    "unit": "no hub and no cluster: the code in process, on a virtual clock where time matters "
            "(a few start one real program: Prometheus, PostgreSQL, mkdocs, the CLI)",
    "hub": "a real JupyterHub on the simulated cluster (marked integration)",
    "release": "the z2jh release installed on the simulated cluster (tests/release, marked integration)",
    "sim": "the simulator's node agent, GPUs and network, alone or on the real control plane "
           "(tests/sim, tests/controlplane)",
}
FOLDER_KINDS = {"release": "release", "sim": "sim", "controlplane": "sim"}
SLOWEST_MODULES = 15
_module_seconds: Counter[str] = Counter()  # setup + call + teardown of each module's tests
_module_span: dict[str, tuple[float, float, str]] = {}  # each module's first start, last stop, worker
LAST_MODULES = 8


def pytest_addoption(parser):
    parser.addoption("--hub-python", default=None, metavar="PYTHON",
                     help="the Python of the environment the tests' JupyterHub runs from (default: "
                          "this one); make test runs the hub-facing tests again with "
                          ".venv-jh5/bin/python (the z2jh chart's hub image, JupyterHub 5.5)")


def pytest_configure(config):
    # each worker (and a run without workers) in a network namespace of its own: the cluster's
    # non-special addresses local to it, nothing outside reachable (sim.network.namespace)
    if namespace.available():
        namespace.enter()
    config.addinivalue_line("markers", "jupyterhub(major, reason): the test makes sense only on "
                                       "this JupyterHub major (of the hub the tests start)")
    for kind, meaning in KINDS.items():
        config.addinivalue_line("markers", f"{kind}: {meaning} (set by tests/conftest.py)")
    # absolute, not resolved: a virtualenv's python is a link out of it
    live.HUB_PYTHON = str(Path(config.getoption("--hub-python") or sys.executable).absolute())
    live.HUB_VERSION = subprocess.run([live.HUB_PYTHON, "-c", "import jupyterhub; print(jupyterhub.__version__)"],
                                      capture_output=True, text=True, check=True).stdout.strip()


def pytest_report_header(config):
    return f"tests' JupyterHub: {live.HUB_VERSION} ({live.HUB_PYTHON})"


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    _module_seconds[module] += report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    start, stop, _ = _module_span.get(module, (report.start, report.stop, ""))
    _module_span[module] = (min(start, report.start), max(stop, report.stop), worker.id if worker else "")


def pytest_terminal_summary(terminalreporter):
    """The modules that take the suite's time (`--durations` lists single tests; a module's
    shared fixtures, and a session's first cluster, count in the module that set them up), and
    the last to end, on which worker, in seconds from the pass's first test: a pass that ends
    on one long module while the other workers idle wants that module earlier in
    `order.SLOWEST_FIRST`."""
    if _module_seconds:
        terminalreporter.write_sep("=", f"slowest {SLOWEST_MODULES} modules")
        for path, seconds in _module_seconds.most_common(SLOWEST_MODULES):
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")
        first = min(start for start, _, _ in _module_span.values())
        terminalreporter.write_sep("=", f"the last {LAST_MODULES} modules to end (from, to: s into the pass)")
        for path, (start, stop, worker) in sorted(_module_span.items(), key=lambda kv: kv[1][1])[-LAST_MODULES:]:
            terminalreporter.write_line(f"{start - first:7.0f} {stop - first:7.0f} {worker:5} {path}")
        if os.environ.get("GPU_RECLAIM_TEST_SPANS"):  # every module's span (a pass a file, by its hub's version)
            Path(f"{os.environ['GPU_RECLAIM_TEST_SPANS']}.{live.HUB_VERSION}").write_text(json.dumps(_module_span))


def kind_of(item) -> str:
    folder = Path(item.path).relative_to(Path(__file__).parent).parts[0]
    if folder in FOLDER_KINDS:
        return FOLDER_KINDS[folder]
    return "hub" if item.get_closest_marker("integration") else "unit"


def other_majors_only(item) -> bool:
    marker = item.get_closest_marker("jupyterhub")
    return marker is not None and marker.args[0] != hub_major()


def pytest_collection_modifyitems(config, items):
    # a test for the other JupyterHub major is not collected (deselected, not skipped): the
    # pass on that major runs it
    deselected = [item for item in items if other_majors_only(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not other_majors_only(item)]
    for item in items:
        item.add_marker(kind_of(item))
    # the slowest modules first, so that a pass on several workers ends on short ones
    # (tests/support/order.py; make test keeps this order: --no-loadscope-reorder)
    items.sort(key=lambda item: order.rank(item.nodeid))


# the fixtures every live module gets (tests/support/live.py makes them)
sim = sim_fixture("module")
hub = hub_fixture(REPO / "tests" / "jupyterhub_config.py")
api = api_fixture("function")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    """Debian's Chromium, for the modules that drive pages (tests/web, tests/lab)."""
    from playwright.async_api import async_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (apt-get install chromium)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
def kubeconfig(sim, monkeypatch) -> str:
    """The cluster's kubeconfig as this test's default: KUBECONFIG, and the default location
    kubernetes_asyncio took from it when an earlier test imported it."""
    from kubernetes_asyncio.config import kube_config

    path = sim.info["kubeconfig"]
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    return path
