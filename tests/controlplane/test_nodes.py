"""The node agent on the real control plane (issue 37): the scenario's nodes registered and
kept alive through the real API, the real kube-scheduler placing pods on them (GPU fit, taints,
image locality) in its own words, which the product reads as "waiting for a GPU", and the
Node authorizer holding each node to itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.api.timestamps import parse_time
from gpu_reclaim_sim.controlplane.components import ControlPlane
from jupyterhub_gpu_reclaim.signals import pod_facts
from jupyterhub_gpu_reclaim.spawner import affinity

from ..support.controlplane import NodeAgentProcess, admin_api, namespace, node_ready
from ..support.sim_cluster import wait_for

PYTORCH = "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02"
SMALL = "quay.io/jupyterhub/singleuser:5.3"  # 200 MB: ImageLocality scores it little
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_NODE = {"cpu": "8", "memory": "32Gi", "gpus": 2, "gpuModel": "NVIDIA A100-SXM4-40GB", "gpuMemory": "40GiB",
            "labels": {"hub.jupyter.org/node-purpose": "user"}, "taints": [GPU_TAINT]}
SCENARIO = {
    "name": "nodes", "namespaces": [], "mode": "process", "defaultImageSize": "1GB",
    "images": [{"name": PYTORCH, "size": "5GB"}, {"name": SMALL, "size": "200MB"}],
    "nodeGroups": [
        {"name": "gpu-warm", "count": 1, **GPU_NODE, "images": [PYTORCH, SMALL]},  # has the images already
        {"name": "gpu-cold", "count": 1, **GPU_NODE},
        {"name": "cpu", "count": 1, "cpu": "4", "memory": "16Gi"},
    ],
}
NODES = ["cpu-1", "gpu-cold-1", "gpu-warm-1"]


@pytest.fixture(scope="module")
def nodes(control_plane: ControlPlane, tmp_path_factory) -> Iterator[k8s.CoreV1Api]:
    agent = NodeAgentProcess(control_plane, SCENARIO, tmp_path_factory.mktemp("nodeagent"))
    core = k8s.CoreV1Api(admin_api(control_plane))
    try:
        wait_for(agent.registered, "the nodes registered")
        # Ready, and the node lifecycle controller has taken the not-ready taint off again
        wait_for(lambda: all(node_ready(n) for n in core.list_node().items) and len(core.list_node().items) == 3,
                 "three Ready nodes without the not-ready taint")
        yield core
    finally:
        agent.stop()


def _pod(name: str, gpus: int = 0, image: str = PYTORCH, cpu: str = "") -> dict:
    resources: dict = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    if cpu:
        resources["requests"] = {"cpu": cpu}
    return {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "notebook", "image": image, "resources": resources}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
        "nodeSelector": {"hub.jupyter.org/node-purpose": "user"} if gpus else {},
        "terminationGracePeriodSeconds": 0}}


@pytest.fixture
def ns(nodes: k8s.CoreV1Api, request) -> Iterator[str]:
    with namespace(nodes, f"t-{abs(hash(request.node.name)) % 10**8}") as name:
        yield name
        for p in nodes.list_namespaced_pod(name).items:  # at once: these pods need no grace period
            nodes.delete_namespaced_pod(p.metadata.name, name, grace_period_seconds=0)


def test_the_scenarios_nodes_register_through_the_real_api_server(nodes, control_plane):
    assert control_plane.version() == "v1.37.2"
    by_name = {n.metadata.name: n for n in nodes.list_node().items}
    assert sorted(by_name) == NODES
    gpu = by_name["gpu-warm-1"]
    assert gpu.status.capacity["nvidia.com/gpu"] == gpu.status.allocatable["nvidia.com/gpu"] == "2"
    assert gpu.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert gpu.metadata.labels["hub.jupyter.org/node-purpose"] == "user"
    assert [(t.key, t.value, t.effect) for t in gpu.spec.taints] == [("nvidia.com/gpu", "present", "NoSchedule")]
    assert gpu.status.node_info.kubelet_version == "v1.37.2"
    assert any(PYTORCH in i.names for i in gpu.status.images)
    assert "nvidia.com/gpu" not in by_name["cpu-1"].status.capacity
    # each node's Lease, held by the node and renewed (every 10 s)
    leases = k8s.CoordinationV1Api(nodes.api_client)
    lease = leases.read_namespaced_lease("gpu-cold-1", "kube-node-lease")
    assert lease.spec.holder_identity == "gpu-cold-1" and lease.spec.lease_duration_seconds == 40
    assert lease.metadata.owner_references[0].uid == by_name["gpu-cold-1"].metadata.uid
    first = lease.spec.renew_time
    wait_for(lambda: leases.read_namespaced_lease("gpu-cold-1", "kube-node-lease").spec.renew_time > first,
             "a renewal of the lease", timeout=30)


def test_the_real_scheduler_places_a_gpu_pod_on_the_node_that_has_its_image(nodes, ns):
    nodes.create_namespaced_pod(ns, _pod("gpu-notebook", gpus=1))
    pod = wait_for(lambda: (p := nodes.read_namespaced_pod("gpu-notebook", ns)).spec.node_name and p,
                   "the pod bound to a node")
    assert pod.spec.node_name == "gpu-warm-1"  # ImageLocality: 5 GB already there
    events = wait_for(lambda: nodes.list_namespaced_event(  # the scheduler's recorder writes it after binding
        ns, field_selector="involvedObject.name=gpu-notebook,reason=Scheduled").items, "the Scheduled event")
    assert events[0].message == f"Successfully assigned {ns}/gpu-notebook to gpu-warm-1"
    # a CPU pod is kept off the GPU nodes' taint... unless it tolerates it; without the
    # toleration it goes to the CPU node
    cpu = _pod("cpu-notebook", image="python:3.12-slim")
    del cpu["spec"]["tolerations"]
    nodes.create_namespaced_pod(ns, cpu)
    assert wait_for(lambda: nodes.read_namespaced_pod("cpu-notebook", ns).spec.node_name, "a node") == "cpu-1"


def test_a_pod_waiting_for_a_gpu_is_told_so_by_the_real_scheduler_and_the_product_reads_it(nodes, ns):
    for i in range(2):  # both GPUs of each GPU node taken
        nodes.create_namespaced_pod(ns, _pod(f"holder-{i}", gpus=2))
    wait_for(lambda: all(nodes.read_namespaced_pod(f"holder-{i}", ns).spec.node_name for i in range(2)), "holders bound")
    nodes.create_namespaced_pod(ns, _pod("waiting", gpus=1))

    def unschedulable() -> dict | None:
        raw = nodes.api_client.sanitize_for_serialization(nodes.read_namespaced_pod("waiting", ns))
        conditions = raw.get("status", {}).get("conditions") or []
        return raw if any(c.get("reason") == "Unschedulable" for c in conditions) else None

    pod = wait_for(unschedulable, "the pod marked unschedulable")
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    message = condition["message"]
    # the real scheduler's words: the GPU shortage on two nodes, the CPU node left out by the selector
    assert message.startswith("0/3 nodes are available: ")
    assert "2 Insufficient nvidia.com/gpu" in message
    assert "1 node(s) didn't match Pod's node affinity/selector" in message
    assert "preemption: " in message
    events = wait_for(lambda: nodes.list_namespaced_event(
        ns, field_selector="involvedObject.name=waiting,reason=FailedScheduling").items, "the FailedScheduling event")
    assert events[0].message == message
    # what the product makes of it: a pod waiting for a GPU, since the condition's time
    assert pod_facts.gpu_shortage(message)
    wait = pod_facts.gpu_wait(pod)
    assert wait is not None
    assert wait.since == parse_time(condition["lastTransitionTime"])


def test_the_node_authorizer_holds_each_node_to_itself(nodes, control_plane, tmp_path):
    from kubernetes import config as k8s_config

    issued = control_plane.authority.issue("node-gpu-cold-1-test", "system:node:gpu-cold-1", ("system:nodes",))
    config = control_plane.authority.kubeconfig(tmp_path / "node.kubeconfig", control_plane.server,
                                                "system:node:gpu-cold-1", client=issued)
    as_node = k8s.CoreV1Api(k8s_config.new_client_from_config(str(config)))
    as_node.patch_node_status("gpu-cold-1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    with pytest.raises(ApiException) as refused:  # another node's status: NodeRestriction
        as_node.patch_node_status("gpu-warm-1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:  # secrets of no pod on this node: the Node authorizer
        as_node.list_secret_for_all_namespaces()
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:  # a label only the cluster's admin may set
        as_node.patch_node("gpu-cold-1", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}})
    assert refused.value.status == 403


def _json(core: k8s.CoreV1Api, obj) -> dict:
    return core.api_client.sanitize_for_serialization(obj)


def test_the_spawners_image_affinity_saves_the_pull_the_real_scheduler_would_make(nodes, ns):
    """A small image on a busy node: the real scheduler's ImageLocality scores it too little to
    outweigh the emptier node (LeastAllocated), so a plain pod pulls there; the affinity
    spawner.affinity computes from the nodes the API server reports sends it to the holder, in
    `prefer` and in `require` (merged with z2jh's node-purpose term), and the API server accepts
    both as they are written."""
    nodes.create_namespaced_pod(ns, _pod("busy", cpu="7"))  # on gpu-warm-1 (it has the big image)
    busy = wait_for(lambda: nodes.read_namespaced_pod("busy", ns).spec.node_name, "the busy pod bound")
    assert busy == "gpu-warm-1"  # no GPU asked: a tolerating pod still takes the image holder
    plain = _pod("plain", gpus=1, image=SMALL)
    nodes.create_namespaced_pod(ns, plain)
    assert wait_for(lambda: nodes.read_namespaced_pod("plain", ns).spec.node_name, "plain bound") == "gpu-cold-1"

    index = affinity.ImageIndex()
    node_objects = {n.metadata.name: _json(nodes, n) for n in nodes.list_node().items}
    index.replace(node_objects.values())
    assert index.nodes_with(SMALL) == {"gpu-warm-1"}  # the names the node agent reports, read back
    pods_by_node: dict[str, list[dict]] = {}
    for p in nodes.list_pod_for_all_namespaces().items:
        pods_by_node.setdefault(p.spec.node_name or "", []).append(_json(nodes, p))
    purpose = [{"matchExpressions": [{"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]}]
    candidates, fits = affinity.candidates_and_fits(
        index.nodes_with(SMALL), node_objects, pods_by_node, {"nvidia.com/gpu": 1, "cpu": "100m"}, 0,
        _pod("x")["spec"]["tolerations"], required_terms=purpose)
    assert (candidates, fits) == (["gpu-warm-1"], ["gpu-warm-1"])
    for mode in ("prefer", "require"):
        required, preferred = affinity.apply(affinity.choose_mode(mode, candidates, fits), purpose, [])
        body = _pod(f"with-{mode}", gpus=1, image=SMALL)
        body["spec"]["affinity"] = {"nodeAffinity": {
            **({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": required}} if required else {}),
            **({"preferredDuringSchedulingIgnoredDuringExecution": preferred} if preferred else {})}}
        nodes.create_namespaced_pod(ns, body)
        assert wait_for(lambda mode=mode: nodes.read_namespaced_pod(f"with-{mode}", ns).spec.node_name,
                        f"the {mode} pod bound") == "gpu-warm-1"


def test_the_api_server_holds_node_name_fields_to_one_value_as_the_spawner_assumes(nodes, ns):
    body = _pod("two-names", gpus=1)
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-warm-1", "gpu-cold-1"]}]}]}}}
    with pytest.raises(ApiException) as refused:
        nodes.create_namespaced_pod(ns, body)
    assert refused.value.status == 422
    assert "must be only one value when `operator` is 'In' or 'NotIn' for node field selector" in refused.value.body
