"""Readiness probes on the real simulator (`jupyterhub-gpu-reclaim-sim run`, process mode),
through the official client and kubectl: a container with a `readinessProbe` runs but is
not ready (nor its pod, nor its Service endpoint) until the probe passes — `tcpSocket` on
a named port, `httpGet` (a 404 is a failure, with the kubelet's `Unhealthy` event),
`exec` — and stops being ready when it fails again; the node's probe passes a
NetworkPolicy that refuses everyone else. The thresholds are checked without processes.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import uuid

import pytest
from kubernetes import client as k8s

from gpu_reclaim_sim.kubelet import cgroups, probes
from gpu_reclaim_sim.network import nftables

from ..support.sim_cluster import kubectl, sim_fixtures, wait_for

NS = "probes"
IMAGE = "python:3.12-slim"
# NetworkPolicy is enforced only with the data plane: root, nftables and cgroup2
POLICED = cgroups.available() and not nftables.unavailable()
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}

sim, core = sim_fixtures({
    "name": "probes", "namespaces": [NS], "mode": "process", "images": [{"name": IMAGE, "size": "50MB"}],
    "nodeGroups": [{"name": "cpu", "count": 1, "cpu": "16", "memory": "64Gi", "images": [IMAGE]}]})


def container(name: str, script: str, probe: dict, ports: list[dict] | None = None) -> dict:
    return {"name": name, "image": IMAGE, "command": ["sh", "-c", script], "env": [POD_IP],
            "ports": ports or [], "readinessProbe": {"periodSeconds": 1, **probe}}


def create(core: k8s.CoreV1Api, name: str, *containers: dict, labels: dict | None = None) -> None:
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": name, "labels": labels or {}},
                                    "spec": {"containers": list(containers), "terminationGracePeriodSeconds": 0}})


def statuses(core: k8s.CoreV1Api, name: str) -> tuple[str, dict[str, bool], str]:
    """The pod's phase, each container's readiness and the pod's Ready condition."""
    pod = core.read_namespaced_pod(name, NS)
    ready = next((c.status for c in pod.status.conditions or [] if c.type == "Ready"), "")
    return pod.status.phase, {c.name: c.ready for c in pod.status.container_statuses or []}, ready


def running(core: k8s.CoreV1Api, name: str) -> tuple[str, dict[str, bool], str]:
    return wait_for(lambda: (s := statuses(core, name))[0] == "Running" and s, f"pod {name} running")


def unhealthy(core: k8s.CoreV1Api, name: str) -> list[str]:
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name},reason=Unhealthy").items
    return [e.message for e in events]


def connect(ip: str, port: int) -> int:
    """0 when a connection from here (outside the cluster) opens, else its errno."""
    s = socket.socket()
    s.settimeout(5)
    try:
        return s.connect_ex((ip, port))
    finally:
        s.close()


def test_a_tcp_probe_holds_readiness_until_the_port_listens_and_the_node_passes_network_policy(sim, core):
    gate = f"/tmp/listen-{uuid.uuid4().hex}"
    serve = f"while [ ! -f {gate} ]; do sleep 0.1; done; exec python3 -m http.server 8080 --bind $POD_IP"
    core.create_namespaced_service(NS, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tcp"},
                                        "spec": {"selector": {"app": "tcp"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    if POLICED:  # nobody may connect to the pod: only the node's probe gets through
        k8s.NetworkingV1Api(core.api_client).create_namespaced_network_policy(NS, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny-tcp"},
            "spec": {"podSelector": {"matchLabels": {"app": "tcp"}}, "policyTypes": ["Ingress"]}})
    create(core, "tcp", container("web", serve, {"tcpSocket": {"port": "http"}},
                                  [{"name": "http", "containerPort": 8080}]), labels={"app": "tcp"})
    _, ready, condition = running(core, "tcp")
    assert (ready, condition) == ({"web": False}, "False")  # nothing listens before the gate opens
    wait_for(lambda: any("connect: connection refused" in m for m in unhealthy(core, "tcp")), "Unhealthy event")
    ip = core.read_namespaced_pod("tcp", NS).status.pod_ip
    wait_for(lambda: [a.ip for s in core.read_namespaced_endpoints("tcp", NS).subsets or []
                      for a in s.not_ready_addresses or []] == [ip], "not-ready endpoint")
    kubectl(sim, "-n", NS, "exec", "tcp", "--", "touch", gate)
    wait_for(lambda: statuses(core, "tcp")[1:] == ({"web": True}, "True"), "ready pod")
    wait_for(lambda: [a.ip for s in core.read_namespaced_endpoints("tcp", NS).subsets or []
                      for a in s.addresses or []] == [ip], "ready endpoint")
    if POLICED:
        assert connect(ip, 8080) == errno.EHOSTUNREACH  # refused by the policy: the probe came from the node


def test_http_probes_succeed_below_400_and_a_404_keeps_its_container_unready(sim, core):
    web = "exec python3 -m http.server {} --bind $POD_IP --directory /usr"
    create(core, "http",
           container("found", web.format(8081), {"httpGet": {"path": "/bin/", "port": 8081}}),
           container("missing", web.format(8082), {"httpGet": {"path": "/nothing-here", "port": 8082},
                                                   "failureThreshold": 1}))
    wait_for(lambda: statuses(core, "http")[1].get("found"), "ready container")
    wait_for(lambda: any(m == "Readiness probe failed: HTTP probe failed with statuscode: 404"
                         for m in unhealthy(core, "http")), "a 404's Unhealthy event")
    assert statuses(core, "http")[1:] == ({"found": True, "missing": False}, "False")


def test_an_exec_probe_follows_its_commands_exit_code_both_ways(sim, core):
    flag = f"/tmp/ready-{uuid.uuid4().hex}"
    create(core, "exec", container("app", "exec sleep 3600", {"exec": {"command": ["test", "-f", flag]},
                                                               "failureThreshold": 1}))
    assert running(core, "exec")[1:] == ({"app": False}, "False")
    kubectl(sim, "-n", NS, "exec", "exec", "--", "touch", flag)
    wait_for(lambda: statuses(core, "exec")[1:] == ({"app": True}, "True"), "ready pod")
    kubectl(sim, "-n", NS, "exec", "exec", "--", "rm", flag)
    wait_for(lambda: statuses(core, "exec")[1:] == ({"app": False}, "False"), "unready pod again")


def test_readiness_changes_only_after_as_many_results_in_a_row_as_the_threshold_asks():
    probe = probes.Probe.of({"exec": {"command": ["true"]}})
    results = iter([False, True, False, True, True, False, False, True, False, False, False, True])
    reports: list[tuple[int, bool]] = []
    failures: list[str] = []
    step = 0

    async def run() -> str | None:
        nonlocal step
        step += 1
        try:
            return None if next(results) else f"failure {step}"
        except StopIteration:
            raise asyncio.CancelledError from None

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await probes.watch(probes.Probe(spec=probe.spec, period=0, success_threshold=2, failure_threshold=3),
                               run, lambda ready: reports.append((step, ready)), failures.append)

    asyncio.run(main())
    # Kubernetes' defaults
    assert (probe.initial_delay, probe.period, probe.timeout, probe.success_threshold, probe.failure_threshold) == (
        0, 10, 1, 1, 3)
    assert reports == [(5, True), (11, False)]  # two successes in a row, then three failures in a row
    assert failures == [f"failure {n}" for n in (1, 3, 6, 7, 9, 10, 11)]
