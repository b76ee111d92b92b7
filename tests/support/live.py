"""Starting the live tests' processes: the simulated cluster, a real JupyterHub on it, and
the hub's REST API as the tests' service; and the environment the tests' hubs run from
(tests/conftest.py sets it from --hub-python)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from gpu_reclaim_sim.cluster import STOP_S
from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.launch import free_port, start_hub, start_sim
from gpu_reclaim_sim.paths import DEFAULT_SCENARIO, REPO

from .hubapi import HubAPI
from .sim_cluster import SHARED_START_S

HUB_PYTHON = sys.executable
LAB = REPO / "lab"  # the JupyterLab extension's distribution, jupyterhub-gpu-reclaim-lab
HUB_VERSION = ""  # the hub environment's JupyterHub (tests/conftest.py: pytest_configure)


def hub_major() -> int:
    return int(HUB_VERSION.split(".")[0])


def start_test_sim(workdir: Path, plane: ControlPlane):
    """The demo's cluster in process mode, with fast image pulls so tests stay quick, on the
    worker's real control plane (its nodes and namespaces taken away when it stops)."""
    scenario = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    scenario["bandwidth"] = "2GB/s"       # the 5 GB GPU image in 2.5 s
    scenario["gpu"] = {"collectionInterval": "1s"}
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return start_sim(workdir, path, SHARED_START_S, ["--control-plane", str(plane.work)])


def sim_fixture(scope: str):
    """A `sim` fixture of `scope` (start_test_sim): each module's own cluster, or a package's
    (its conftest assigns `sim_fixture("package")` to `sim`) where its modules leave the
    cluster as they found it: their servers stopped, so their pods gone."""

    @pytest.fixture(scope=scope)
    def sim(control_plane, tmp_path_factory):
        child = start_test_sim(tmp_path_factory.mktemp("sim"), control_plane)
        yield child
        child.stop(grace=STOP_S)  # it empties its namespaces first

    return sim


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


def api_fixture(scope: str):
    """An `api` fixture of `scope`: the hub's REST API as the tests' service, which stops
    every server started under it when the scope ends (a test, or a module that assigns
    `api_fixture("module")` to `api`)."""

    @pytest_asyncio.fixture(scope=scope, loop_scope=scope)
    async def api(hub):
        async with HubAPI.of(hub) as client:
            yield client

    return api
