"""z2jh's user-scheduler as the chart renders it, run as the real kube-scheduler (the binary
of controlplane/'s Go module) on the real control plane (issue 37): with the chart's own
KubeSchedulerConfiguration, arguments, ServiceAccount and RBAC, it takes its leader Lease,
is refused nothing it asks for, and packs user pods onto the busiest node that fits
(MostAllocated), where the default scheduler spreads them (LeastAllocated)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.utils import create_from_dict

from gpu_reclaim_sim.controlplane.components import ControlPlane, free_port
from gpu_reclaim_sim.z2jh import release

from ..support.controlplane import NodeAgentProcess, admin_api
from ..support.sim_cluster import wait_for

pytestmark = pytest.mark.skipif(bool(release.chart_missing()), reason="the z2jh chart is not beside the clone")

NS = release.NAMESPACE
USER_NODE = {"cpu": "8", "memory": "32Gi", "labels": {"hub.jupyter.org/node-purpose": "user"}}
SCENARIO = {"name": "user-scheduler", "namespaces": [], "mode": "process",
            "nodeGroups": [{"name": "user", "count": 2, **USER_NODE}]}


def _started(docs: list[dict], plane: ControlPlane, work: Path) -> subprocess.Popen[bytes]:
    """The user-scheduler Deployment's container, as its pod would run it: its command with
    the ConfigMap's config, which is changed in one place only — `clientConnection.kubeconfig`,
    the ServiceAccount's token and the API server in a file, where a pod has them in-cluster.
    Its secure port moves off 10259 (one machine, many schedulers). The chart runs the
    kube-scheduler image v1.35, and its ClusterRole is copied from v1.35's
    system:kube-scheduler role; this binary is v1.37, which also watches DRA's
    DeviceTaintRules (its DRADeviceTaints and DRADeviceTaintRules gates are on). The chart's
    role does not grant that watch, and a v1.37 user-scheduler waits for it for ever, never
    leads and schedules nothing; with the two gates off it asks the API server for what the
    chart's image asks (the next test pins the refusal)."""
    core = k8s.CoreV1Api(admin_api(plane))
    token = core.create_namespaced_service_account_token(
        "user-scheduler", NS, {"spec": {"expirationSeconds": 3600}}).status.token
    kubeconfig = plane.authority.kubeconfig(work / "user-scheduler.kubeconfig", plane.server,
                                            f"system:serviceaccount:{NS}:user-scheduler", token=token)
    config = yaml.safe_load(release.find(docs, "ConfigMap", "user-scheduler")["data"]["config.yaml"])
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    [container] = release.find(docs, "Deployment", "user-scheduler")["spec"]["template"]["spec"]["containers"]
    command = [str(plane.bin_dir / "kube-scheduler")] + [
        f"--config={work / 'config.yaml'}" if a.startswith("--config=") else a for a in container["command"][1:]]
    with (work / "user-scheduler.log").open("wb") as out:
        return subprocess.Popen([*command, "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                                 "--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory) -> Iterator[tuple[k8s.CoreV1Api, Path]]:
    work = tmp_path_factory.mktemp("user-scheduler")
    docs = release.render(release.BASE)
    api = admin_api(control_plane)
    core = k8s.CoreV1Api(api)
    # an earlier module's run on this worker's control plane may still be emptying its own `jhub`
    wait_for(lambda: NS not in {n.metadata.name for n in core.list_namespace().items}, "an earlier jhub gone",
             timeout=120)
    core.create_namespace({"metadata": {"name": NS}})
    wait_for(lambda: core.list_namespaced_service_account(NS, field_selector="metadata.name=default").items,
             "the namespace's default ServiceAccount")  # no pod is admitted before it
    for doc in docs:  # the user-scheduler's own objects, as the chart renders them
        if "user-scheduler" in doc["metadata"]["name"] and doc["kind"] in (
                "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"):
            create_from_dict(api, doc, namespace=NS)
    agent = NodeAgentProcess(control_plane, SCENARIO, work / "agent")
    scheduler = _started(docs, control_plane, work)
    try:
        wait_for(agent.registered, "the nodes registered")
        yield core, work / "user-scheduler.log"
    finally:
        os.kill(scheduler.pid, signal.SIGTERM)
        scheduler.wait(timeout=20)
        core.delete_namespace(NS)  # first: the agent's stop then deletes the pods left on its nodes
        agent.stop()


def _pod(name: str, cpu: str, scheduler: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "quay.io/jupyterhub/singleuser:latest",
                                  "resources": {"requests": {"cpu": cpu}}}],
                  "terminationGracePeriodSeconds": 0}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name}, "spec": spec}


def _node_of(core: k8s.CoreV1Api, name: str) -> str:
    return wait_for(lambda: core.read_namespaced_pod(name, NS).spec.node_name, f"{name} bound")


def test_the_charts_user_scheduler_packs_user_pods_and_is_refused_nothing(cluster):
    core, log = cluster
    config = yaml.safe_load(release.find(release.render(release.BASE), "ConfigMap", "user-scheduler")
                            ["data"]["config.yaml"])
    [profile] = config["profiles"]
    lease = config["leaderElection"]["resourceName"]
    coordination = k8s.CoordinationV1Api(core.api_client)
    holder = wait_for(lambda: coordination.read_namespaced_lease(lease, NS).spec.holder_identity
                      if coordination.list_namespaced_lease(NS, field_selector=f"metadata.name={lease}").items
                      else None, "the user-scheduler's leader Lease", timeout=60)
    assert holder
    core.create_namespaced_pod(NS, _pod("first", "3", profile["schedulerName"]))
    first = _node_of(core, "first")
    core.create_namespaced_pod(NS, _pod("packed", "1", profile["schedulerName"]))
    assert _node_of(core, "packed") == first  # MostAllocated: onto the busy node
    core.create_namespaced_pod(NS, _pod("spread", "1"))
    assert _node_of(core, "spread") != first  # the default scheduler: LeastAllocated
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=packed,reason=Scheduled").items
    assert events[0].reporting_component == profile["schedulerName"] or events[0].source.component == \
        profile["schedulerName"]
    refusals = [line for line in log.read_text().splitlines() if "forbidden" in line]
    assert not refusals, "\n".join(refusals[:5])


def test_a_v137_user_scheduler_needs_more_than_the_charts_role(cluster):
    """What an admin who raises `scheduling.userScheduler.image.tag` to v1.37 meets: the
    chart's ClusterRole lets the user-scheduler read everything its own image (v1.35) watches,
    not DRA's DeviceTaintRules, which v1.37 watches."""
    core, _ = cluster
    authorization = k8s.AuthorizationV1Api(core.api_client)
    user = f"system:serviceaccount:{NS}:user-scheduler"

    def allowed(resource: str, group: str = "") -> bool:
        review = authorization.create_subject_access_review({"spec": {"user": user, "groups": [
            "system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
            "resourceAttributes": {"verb": "list", "resource": resource, "group": group}}})
        return bool(review.status.allowed)

    assert allowed("pods") and allowed("nodes") and allowed("resourceslices", "resource.k8s.io")
    assert not allowed("devicetaintrules", "resource.k8s.io")
