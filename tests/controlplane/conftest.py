"""The fixtures of the tests on the real control plane: the worker's control plane
(`control_plane`), the admin's client (`core`), the node agent for the module's `SCENARIO`
(`agent`, once per module) and a namespace per test (`ns`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from gpu_reclaim_sim.controlplane.components import ControlPlane

from ..support.controlplane import NodeAgentProcess, admin_api, namespace, running_agent


@pytest.fixture(scope="module")
def agent(control_plane: ControlPlane, request, tmp_path_factory) -> Iterator[NodeAgentProcess]:  # noqa: F811
    with running_agent(control_plane, request.module.SCENARIO, tmp_path_factory.mktemp("agent")) as running:
        yield running


@pytest.fixture(scope="module")
def core(control_plane: ControlPlane) -> k8s.CoreV1Api:  # noqa: F811
    return k8s.CoreV1Api(admin_api(control_plane))


@pytest.fixture
def ns(agent, core: k8s.CoreV1Api, request) -> Iterator[str]:
    """A namespace named for the test (its module and name: unique on the worker's control plane)."""
    with namespace(core, f"t-{abs(hash(request.node.nodeid)) % 10**8}") as name:
        yield name
