"""The real control plane for tests (issue 37): one per test worker (a pytest session under
xdist), started once by `control_plane` and stopped by its PIDs at the end; `running_agent`
runs the node agent for a scenario against it, as its own process (`NodeAgentProcess`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes_asyncio import client as ak8s
from kubernetes_asyncio import config as ak8s_config

from gpu_reclaim_sim.cluster import forget_node
from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.kubelet.nodes import GROUP_LABEL
from gpu_reclaim_sim.nodeagent.agent import node_names
from gpu_reclaim_sim.paths import pod_log_path
from gpu_reclaim_sim.scenario import from_dict

from .sim_cluster import wait_for

@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane") / "run").start()
    try:
        yield plane
    finally:
        plane.stop()


def admin_api(plane: ControlPlane) -> k8s.ApiClient:
    """A client of the real API server as the cluster's admin (system:masters)."""
    return k8s_config.new_client_from_config(str(plane.admin_kubeconfig))


def node_ready(node: k8s.V1Node) -> bool:
    """Ready, and the node lifecycle controller has taken its not-ready taints off."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])


@contextlib.contextmanager
def namespace(core: k8s.CoreV1Api, name: str) -> Iterator[str]:
    """A namespace for one test, once the controller-manager has made its default ServiceAccount
    (the ServiceAccount admission plugin refuses pods before) and its kube-root-ca.crt; deleted
    afterwards."""
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
             "the namespace's default ServiceAccount")
    # and the CA its pods' kube-api-access volume projects (the root-CA publisher's): a pod
    # made before it would first get a FailedMount, as on a real cluster
    wait_for(lambda: core.list_namespaced_config_map(name, field_selector="metadata.name=kube-root-ca.crt").items,
             "the namespace's kube-root-ca.crt")
    try:
        yield name
    finally:
        core.delete_namespace(name)


BUSYBOX = "docker.io/library/busybox:1.37"  # the image the tests' scenarios pre-pull


def busybox_pod(name: str, script: str, *, node: str, restart: str = "Never", grace: int = 5,
                **container: Any) -> dict:
    """A pod on `node` whose one container, `main`, runs `script` with sh."""
    return {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": restart,
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", script], **container}]}}


def phases(core: k8s.CoreV1Api, ns: str, name: str, until: str, timeout: int = 60) -> list[str]:
    """The phases the pod goes through, as a watch sees them, until `until`."""
    seen: list[str] = []
    for event in k8s_watch.Watch().stream(core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
                                          timeout_seconds=timeout):
        phase = event["object"].status.phase
        if not seen or seen[-1] != phase:
            seen.append(phase)
        if phase == until:
            return seen
    raise AssertionError(f"pod {name} never {until}: {seen}")


async def _forget_nodes(plane: ControlPlane, names: Iterable[str]) -> None:
    """`forget_node` for each of `names`, as the admin."""
    async with await ak8s_config.new_client_from_config(str(plane.admin_kubeconfig)) as api:
        for name in names:
            await forget_node(ak8s.CoreV1Api(api), name)


@contextlib.contextmanager
def running_agent(plane: ControlPlane, scenario: dict, work: Path) -> Iterator["NodeAgentProcess"]:
    """The node agent for `scenario`, once its nodes are Ready and untainted; stopped (its
    Nodes deleted) afterwards."""
    agent = NodeAgentProcess(plane, scenario, work)
    core = k8s.CoreV1Api(admin_api(plane))
    try:
        wait_for(agent.registered, "the nodes registered")
        wait_for(lambda: all(node_ready(core.read_node(n)) for n in agent.nodes), "the nodes Ready, untainted")
        yield agent
    finally:
        agent.stop()  # and its nodes deleted: other modules' scenarios meet none of them


class NodeAgentProcess:
    """`python -m gpu_reclaim_sim.nodeagent` for `scenario` (a dict, written as YAML)."""

    def __init__(self, plane: ControlPlane, scenario: dict, work: Path) -> None:
        self.plane, self.nodes = plane, [name for name, _ in node_names(from_dict(scenario))]
        self.groups = [g.name for g in from_dict(scenario).node_groups]
        work.mkdir(parents=True, exist_ok=True)
        path = work / "scenario.yaml"
        path.write_text(yaml.safe_dump(scenario))
        self.log = work / "nodeagent.log"
        self.data_dir = work / "data"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gpu_reclaim_sim.nodeagent", "--server", plane.server,
                 "--pki", str(plane.authority.directory), "--scenario", str(path), "--version", plane.version(),
                 "--data-dir", str(self.data_dir)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def registered(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the node agent exited ({self.process.returncode}):\n{self.log.read_text()}")
        return "nodes registered:" in self.log.read_text()

    def control_url(self) -> str:
        """Where the agent serves its GPUs' metrics and `use_gpu` (sim.control)."""
        lines = [line for line in self.log.read_text().splitlines() if line.startswith("control endpoint: ")]
        return lines[-1].split(": ", 1)[1]

    def container_log(self, namespace: str, pod: str, container: str, previous: bool = False) -> str:
        """What a container wrote, read from its log file (tests/controlplane/test_kubelet_api
        reads it through the API server with kubectl)."""
        path = pod_log_path(self.data_dir, namespace, pod, container, previous)
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        """Stop the agent and delete its Nodes with the pods bound to them (`forget_node`), so
        that the next module's agent on this worker's control plane starts from none."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        core = k8s.CoreV1Api(admin_api(self.plane))
        groups = ",".join(sorted(self.groups))  # and the nodes its autoscaler added
        added = [n.metadata.name for n in core.list_node(label_selector=f"{GROUP_LABEL} in ({groups})").items]
        asyncio.run(_forget_nodes(self.plane, dict.fromkeys([*self.nodes, *added])))
