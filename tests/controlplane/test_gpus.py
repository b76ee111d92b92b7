"""The node agent's GPUs on the real control plane (issue 37): the real kube-scheduler places a
pod that asks for `nvidia.com/gpu` (a MIG instance, a time-sliced replica) by the Node's allocatable, the agent's
device plugin hands it the devices (NVIDIA_VISIBLE_DEVICES), `use_gpu` from inside the pod sets
its load at the agent's control endpoint with the pod's own token, and dcgm-exporter's
metrics show it; another pod's token is refused; a pod asking for more GPUs than are free
waits with the real scheduler's words."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from ..support.controlplane import BUSYBOX, busybox_pod, phases
from ..support.sim_cluster import wait_for

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_GROUP = {"cpu": "8", "memory": "32Gi", "gpus": 2, "gpuModel": "NVIDIA A100-SXM4-40GB", "gpuMemory": "40GiB",
             "taints": [TAINT], "images": [BUSYBOX]}
SCENARIO = {
    "name": "node-gpus", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "gpu": {"collectionInterval": "1s"},
    "nodeGroups": [
        {"name": "whole", "count": 1, **GPU_GROUP},
        {"name": "mig", "count": 1, **GPU_GROUP, "gpus": 1, "mig": {"profile": "1g.10gb"}},
        {"name": "sliced", "count": 1, **GPU_GROUP, "gpus": 1, "timeSlicing": {"replicas": 2, "renameByDefault": True}},
    ],
}
PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.169.254/32"]  # z2jh's nonPrivateIPs' except
# what the pod runs: its devices and its use_gpu answer to its log, then it keeps its GPUs
USE_GPU = ("echo devices=$NVIDIA_VISIBLE_DEVICES; echo token=$GPU_RECLAIM_SIM_GPU_TOKEN; "
           "python -c 'import json; from gpu_reclaim_sim.gpu import use_gpu; "
           "print(\"load=\" + json.dumps(use_gpu(80, 600, 3000, block=False)))'; "
           "sleep 600")


def gpu_pod(name: str, resource: str = "nvidia.com/gpu", count: int = 1, script: str = USE_GPU) -> dict:
    """A pod that asks for `count` of `resource`, placed by the scheduler (no node named)."""
    body = busybox_pod(name, script, node="", grace=1, resources={"limits": {resource: str(count)}})
    del body["spec"]["nodeSelector"]
    body["spec"]["tolerations"] = [{**TAINT, "operator": "Equal"}]
    return body


def logged(agent, ns: str, pod: str, key: str) -> str:
    """The value the pod logged as `key=...` (waits for it)."""
    def find() -> str | None:
        for line in agent.container_log(ns, pod, "main").splitlines():
            if line.startswith(f"{key}="):
                return line.split("=", 1)[1]
        return None
    return wait_for(find, f"{key} in the log of {pod}")


def control(agent, path: str, body: dict | None = None, token: str = "") -> tuple[int, object]:
    request = urllib.request.Request(agent.control_url() + path, method="POST" if body is not None else "GET",
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read()) if "json" in r.headers.get("Content-Type", "") else r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def gpu_util(agent, ns: str, pod: str) -> float | None:
    """DCGM_FI_DEV_GPU_UTIL of the pod's GPU, as dcgm-exporter reports it."""
    _, text = control(agent, "/metrics")
    for family in text_string_to_metric_families(str(text)):
        for sample in family.samples:
            if sample.name == "DCGM_FI_DEV_GPU_UTIL" and sample.labels.get("pod") == pod \
                    and sample.labels.get("namespace") == ns:
                return sample.value
    return None


def test_a_gpu_pod_placed_by_the_real_scheduler_gets_its_device_and_sets_its_load(agent, core, ns):
    # z2jh's user pods may reach no private address (its singleuser NetworkPolicy): use_gpu
    # works all the same, as a real GPU needs no network
    k8s.NetworkingV1Api(core.api_client).create_namespaced_network_policy(ns, {
        "metadata": {"name": "singleuser"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE}}]}]}})
    probe = ("python -c 'import errno, socket; s = socket.socket(); s.settimeout(5); "
             "print(\"api=\" + errno.errorcode.get(s.connect_ex((\"10.96.0.1\", 443)), \"open\"))'; ")
    core.create_namespaced_pod(ns, gpu_pod("trainer", script=probe + USE_GPU))
    assert phases(core, ns, "trainer", "Running") == ["Pending", "Running"]
    assert logged(agent, ns, "trainer", "api") == "EHOSTUNREACH"  # the policy holds: the API server is private
    assert core.read_namespaced_pod("trainer", ns).spec.node_name == "whole-1"
    device = logged(agent, ns, "trainer", "devices")
    _, gpus = control(agent, "/gpus")
    [held] = [g for g in gpus if g["pod"] == f"{ns}/trainer"]  # type: ignore[union-attr]
    assert held["uuid"] == device and held["node"] == "whole-1" and device.startswith("GPU-")
    # use_gpu ran in the pod with its own token; the exporter's next sample shows its load
    assert json.loads(logged(agent, ns, "trainer", "load")) == {"utilization": 80.0, "seconds": 600.0,
                                                                "memory_mib": 3000}
    assert wait_for(lambda: (v := gpu_util(agent, ns, "trainer")) is not None and v >= 70 and v,
                    "the pod's load in the metrics", timeout=30)
    # the node's own metrics hold it; a node without GPUs has none
    status, text = control(agent, "/nodes/whole-1/metrics")
    assert status == 200 and 'pod="trainer"' in str(text)


def test_another_pods_token_is_refused(agent, core, ns):
    for name in ("alice", "bob"):
        core.create_namespaced_pod(ns, gpu_pod(name, script="echo token=$GPU_RECLAIM_SIM_GPU_TOKEN; sleep 600"))
    alice, bob = logged(agent, ns, "alice", "token"), logged(agent, ns, "bob", "token")
    assert alice and bob and alice != bob
    load = {"utilization": 100, "seconds": 60}
    status, answer = control(agent, f"/gpus/{ns}/bob", load, token=alice)
    assert (status, answer) == (403, {"error": "a cluster token or the pod's own token is required"})
    assert control(agent, f"/gpus/{ns}/bob", load)[0] == 403  # no token at all
    assert control(agent, f"/gpus/{ns}/nobody", load, token=alice)[0] == 404
    status, answer = control(agent, f"/gpus/{ns}/bob", load, token=bob)
    assert status == 200 and answer["utilization"] == 100  # type: ignore[index]


def test_a_mig_pod_gets_a_mig_instance(agent, core, ns):
    core.create_namespaced_pod(ns, gpu_pod("small", resource="nvidia.com/mig-1g.10gb",
                                           script="echo devices=$NVIDIA_VISIBLE_DEVICES; sleep 600"))
    assert logged(agent, ns, "small", "devices").startswith("MIG-")
    assert core.read_namespaced_pod("small", ns).spec.node_name == "mig-1"


def test_two_pods_share_a_time_sliced_gpu(agent, core, ns):
    for name in ("first", "second"):
        core.create_namespaced_pod(ns, gpu_pod(name, resource="nvidia.com/gpu.shared",
                                               script="echo devices=$NVIDIA_VISIBLE_DEVICES; sleep 600"))
    first, second = logged(agent, ns, "first", "devices"), logged(agent, ns, "second", "devices")
    assert first == second and first.startswith("GPU-")  # the replicas' physical GPU, as the plugin hands it
    assert {core.read_namespaced_pod(name, ns).spec.node_name for name in ("first", "second")} == {"sliced-1"}


def test_a_pod_asking_for_more_gpus_than_free_waits_with_the_real_schedulers_words(agent, core, ns):
    core.create_namespaced_pod(ns, gpu_pod("holder", count=2, script="sleep 600"))
    assert phases(core, ns, "holder", "Running") == ["Pending", "Running"]
    core.create_namespaced_pod(ns, gpu_pod("waiting", count=1, script="sleep 600"))
    events = wait_for(lambda: core.list_namespaced_event(
        ns, field_selector="involvedObject.name=waiting,reason=FailedScheduling").items, "the FailedScheduling event")
    # every node short of it: the one whose two the holder has, and the MIG and shared ones that have none
    assert events[0].message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert core.read_namespaced_pod("waiting", ns).status.phase == "Pending"
