"""Fixtures that start the real things: the simulated cluster, JupyterHub with
configurable-http-proxy and the unmodified KubeSpawner, and single-user servers.

The tests' hubs run from this Python's environment (JupyterHub 6), or from the one
`--hub-python` names: `make test` runs the hub-facing tests again with `.venv-jh5`, the
z2jh chart's hub image (JupyterHub 5.5). A test that makes sense on one major only is
marked `@pytest.mark.jupyterhub(MAJOR, reason=...)`."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from gpu_reclaim_sim.launch import free_port, start_hub, start_sim
from gpu_reclaim_sim.paths import DEFAULT_SCENARIO, REPO

from .hubapi import HubAPI

HUB_PYTHON = sys.executable
LAB = REPO / "lab"  # the JupyterLab extension's distribution, jupyterhub-gpu-reclaim-lab
HUB_VERSION = ""  # the hub environment's JupyterHub (pytest_configure)
SLOWEST_MODULES = 15
_module_seconds: Counter[str] = Counter()  # setup + call + teardown of each module's tests


def pytest_addoption(parser):
    parser.addoption("--hub-python", default=None, metavar="PYTHON",
                     help="the Python of the environment the tests' JupyterHub runs from (default: "
                          "this one); make test runs the hub-facing tests again with "
                          ".venv-jh5/bin/python (the z2jh chart's hub image, JupyterHub 5.5)")


def pytest_configure(config):
    global HUB_PYTHON, HUB_VERSION
    config.addinivalue_line("markers", "jupyterhub(major, reason): the test makes sense only on "
                                       "this JupyterHub major (of the hub the tests start)")
    # absolute, not resolved: a virtualenv's python is a link out of it
    HUB_PYTHON = str(Path(config.getoption("--hub-python") or sys.executable).absolute())
    HUB_VERSION = subprocess.run([HUB_PYTHON, "-c", "import jupyterhub; print(jupyterhub.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.strip()


def pytest_report_header(config):
    return f"tests' JupyterHub: {HUB_VERSION} ({HUB_PYTHON})"


def pytest_runtest_logreport(report):
    _module_seconds[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    """The modules that take the suite's time (`--durations` lists single tests; a module's
    shared fixtures, and a session's first cluster, count in the module that set them up)."""
    if _module_seconds:
        terminalreporter.write_sep("=", f"slowest {SLOWEST_MODULES} modules")
        for path, seconds in _module_seconds.most_common(SLOWEST_MODULES):
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")


def hub_major() -> int:
    return int(HUB_VERSION.split(".")[0])


def pytest_collection_modifyitems(items):
    # the slow integration tests last, so a quick failure shows first
    items.sort(key=lambda item: item.get_closest_marker("integration") is not None)


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("jupyterhub")
    if marker and marker.args[0] != hub_major():
        pytest.skip(f"JupyterHub {marker.args[0]} only ({marker.kwargs['reason']}); "
                    f"this run's hub is JupyterHub {HUB_VERSION}")


def start_test_sim(workdir: Path):
    """The demo's cluster in process mode, with fast image pulls so tests stay quick."""
    scenario = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    scenario["bandwidth"] = "2GB/s"       # the 5 GB GPU image in 2.5 s
    scenario["gpu"] = {"collectionInterval": "1s"}
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return start_sim(workdir, path)


def sim_fixture(scope: str):
    """A `sim` fixture of `scope` (start_test_sim): each module's own cluster, or a package's
    (its conftest assigns `sim_fixture("package")` to `sim`) where its modules leave the
    cluster as they found it: their servers stopped, so their pods gone."""

    @pytest.fixture(scope=scope)
    def sim(tmp_path_factory):
        child = start_test_sim(tmp_path_factory.mktemp("sim"))
        yield child
        child.stop()

    return sim


sim = sim_fixture("module")


def lab_paths() -> dict[str, str]:
    """A single-user server's environment for the JupyterLab extension of the worktree: what
    its wheel gives it (lab/, docs/lab.md), its code, its build (scripts/setup.sh) and the
    config that enables its server side. Pods see the worktree (not the tests' /tmp)."""
    return {"PYTHONPATH": str(LAB), "JUPYTER_PATH": str(LAB / "jupyterhub_gpu_reclaim_lab"),
            "JUPYTER_CONFIG_PATH": str(LAB / "jupyter-config")}


def start_test_hub(workdir, config, sim, env=None):
    """A real JupyterHub on the cluster with `config`, and a token for the tests' service."""
    token = secrets.token_hex(16)
    child = start_hub(workdir, config, sim.info["kubeconfig"], python=HUB_PYTHON,
                      port=free_port(), env={"GPU_RECLAIM_TEST_TOKEN": token,
                                             "GPU_RECLAIM_REPO": str(REPO),
                                             "GPU_RECLAIM_DEMO_PASSWORD": "test-password",
                                             **(env or {})})
    child.info["token"] = token
    return child


def hub_fixture(config, env=None):
    """A module-scoped `hub` fixture running `config` with `env` (a module assigns it to `hub`)."""

    @pytest.fixture(scope="module")
    def hub(sim, tmp_path_factory):
        child = start_test_hub(tmp_path_factory.mktemp("hub"), config, sim, env)
        yield child
        child.stop(grace=60)

    return hub


hub = hub_fixture(REPO / "tests" / "jupyterhub_config.py")


def api_fixture(scope: str):
    """An `api` fixture of `scope`: the hub's REST API as the tests' service, which stops
    every server started under it when the scope ends (a test, or a module that assigns
    `api_fixture("module")` to `api`)."""

    @pytest_asyncio.fixture(scope=scope, loop_scope=scope)
    async def api(hub):
        async with HubAPI.of(hub) as client:
            yield client

    return api


api = api_fixture("function")


@pytest.fixture
def kubeconfig(sim, monkeypatch) -> str:
    """The cluster's kubeconfig as this test's default: KUBECONFIG, and the default location
    kubernetes_asyncio took from it when an earlier test imported it."""
    from kubernetes_asyncio.config import kube_config

    path = sim.info["kubeconfig"]
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    return path
