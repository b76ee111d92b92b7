"""Fixtures that start the real things: the simulated cluster, JupyterHub with
configurable-http-proxy and the unmodified KubeSpawner, and single-user servers."""

from __future__ import annotations

import secrets

import pytest
import yaml

from jupyterhub_gpu_reclaim.launch import EXAMPLES, REPO, free_port, start_hub, start_sim

from .hubapi import HubAPI


def pytest_collection_modifyitems(items):
    # the slow integration tests last, so a quick failure shows first
    items.sort(key=lambda item: item.get_closest_marker("integration") is not None)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The demo's cluster in process mode, with fast image pulls so tests stay quick."""
    workdir = tmp_path_factory.mktemp("sim")
    scenario = yaml.safe_load((EXAMPLES / "sim" / "cluster.yaml").read_text())
    scenario["bandwidth"] = "2GB/s"       # the 5 GB GPU image in 2.5 s
    scenario["gpu"] = {"collectionInterval": "1s"}
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    child = start_sim(workdir, path)
    yield child
    child.stop()


def start_test_hub(workdir, config, sim, env=None):
    """A real JupyterHub on the cluster with `config`, and a token for the tests' service."""
    token = secrets.token_hex(16)
    child = start_hub(workdir, config, sim.info["kubeconfig"],
                      port=free_port(), env={"GPU_RECLAIM_TEST_TOKEN": token,
                                             "GPU_RECLAIM_REPO": str(REPO),
                                             "GPU_RECLAIM_DEMO_PASSWORD": "test-password",
                                             **(env or {})})
    child.info["token"] = token
    return child


def hub_fixture(config):
    """A module-scoped `hub` fixture running `config` (a module assigns it to `hub`)."""

    @pytest.fixture(scope="module")
    def hub(sim, tmp_path_factory):
        child = start_test_hub(tmp_path_factory.mktemp("hub"), config, sim)
        yield child
        child.stop(grace=60)

    return hub


hub = hub_fixture(REPO / "tests" / "jupyterhub_config.py")


@pytest.fixture
async def api(hub):
    """The hub's REST API as the tests' service; stops every server a test started."""
    async with HubAPI.of(hub) as client:
        yield client


@pytest.fixture
def kubeconfig(sim, monkeypatch) -> str:
    """The cluster's kubeconfig as this test's default: KUBECONFIG, and the default location
    kubernetes_asyncio took from it when an earlier test imported it."""
    from kubernetes_asyncio.config import kube_config

    path = sim.info["kubeconfig"]
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    return path
