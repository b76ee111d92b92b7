"""The cluster autoscaler's scale-up decision (sim.nodeagent.scaleup), without a cluster: how
many nodes of which group for the pods the scheduler could not place, and the reasons it
gives a pod no group helps (tests/controlplane/test_autoscaler.py runs it on the real plane)."""

from __future__ import annotations

from gpu_reclaim_sim.kubelet.nodes import node_manifest
from gpu_reclaim_sim.nodeagent.podfit import Usage
from gpu_reclaim_sim.nodeagent.scaleup import GroupState, plan_scale_up
from gpu_reclaim_sim.scenario import from_dict

SCENARIO = from_dict({"name": "plan", "nodeGroups": [
    {"name": "small", "count": 1, "cpu": "2", "memory": "8Gi"},
    {"name": "more", "count": 0, "cpu": "2", "memory": "8Gi", "autoscaler": {"min": 0, "max": 3}},
    {"name": "gpu", "count": 0, "cpu": "8", "memory": "32Gi", "gpus": 2,
     "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
     "autoscaler": {"min": 0, "max": 1}},
]})
SMALL, MORE, GPU = SCENARIO.node_groups
VERSION = "v1.37.2"  # the kubelet version a template node reports


def pod(name: str, cpu: str = "1", gpus: int = 0) -> dict:
    """A pod as the API server hands it on (an extended resource's request defaulted from its limit)."""
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    resources = {"requests": {"cpu": cpu, **gpu}, "limits": gpu}
    return {"metadata": {"name": name, "uid": name}, "spec": {
        "containers": [{"name": "c", "resources": resources}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}] if gpus else []}}


def groups(*, gpu_nodes: int = 0) -> list[GroupState]:
    return [GroupState(g, node_manifest(f"template-{g.name}", g, SCENARIO, version=VERSION), count, False)
            for g, count in ((MORE, 0), (GPU, gpu_nodes))]


def existing(*pods: dict) -> list[tuple[dict, Usage]]:
    usage = Usage()
    for p in pods:
        usage.add(p)
    return [(node_manifest("small-1", SMALL, SCENARIO, version=VERSION), usage)]


def test_pods_are_bin_packed_onto_the_fewest_new_nodes_of_the_group_that_fits_them():
    pending = [pod(f"p{i}") for i in range(3)]
    plan = plan_scale_up(pending, existing(pod("running", cpu="2")), groups())
    [up] = plan.scale_ups
    # two 1-CPU pods a 2-CPU node: two nodes of `more`, none of the (tainted) GPU group
    assert (up.state.group.name, up.nodes, [p["metadata"]["name"] for p in up.pods]) == ("more", 2, ["p0", "p1", "p2"])
    assert plan.not_helped == {}


def test_a_pod_that_fits_an_existing_node_waits_for_the_scheduler():
    plan = plan_scale_up([pod("p0")], existing(pod("running")), groups())
    assert plan.scale_ups == [] and plan.not_helped == {}


def test_a_pod_no_group_can_help_is_told_why_in_the_schedulers_words():
    plan = plan_scale_up([pod("big", gpus=4), pod("one", gpus=1)], existing(), groups(gpu_nodes=1))
    assert plan.scale_ups == []
    # the GPU group's template has too few GPUs for one and no room left for the other
    assert plan.not_helped == {"big": "2 Insufficient nvidia.com/gpu",
                               "one": "1 Insufficient nvidia.com/gpu, 1 max node group size reached"}
