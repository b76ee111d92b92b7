"""What the spawn form and a waiting user's page say of the GPUs, counted as the scheduler
counts them: placeholders' room is free, a smaller profile fits only where the waiting pod's
own placement (its GPU product) allows it."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.spawner.free_gpus import gpu_room, profile_gpus, smaller_fit

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100"}


def node(name: str, gpus: int, labels: dict | None = None, ready: bool = True) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(name: str, gpus: int, node_name: str = "", priority: int = 0, selector: dict | None = None) -> dict:
    p = {"metadata": {"name": name, "namespace": "jhub", "uid": name},
         "spec": {"priority": priority, "nodeSelector": selector or {},
                  "containers": [{"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
         "status": {"phase": "Running" if node_name else "Pending"}}
    if node_name:
        p["spec"]["nodeName"] = node_name
    else:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                                      "lastTransitionTime": "2026-12-06T13:00:00Z"}]
    return p


PROFILES = [{"display_name": "CPU", "slug": "cpu"},
            {"display_name": "1 GPU", "slug": "gpu-1", "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}}},
            {"display_name": "2 GPUs", "slug": "gpu-2", "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 2}}}]


def test_profile_gpus():
    assert [profile_gpus(p) for p in PROFILES] == [0, 1, 2]
    assert profile_gpus({"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "lots"}}}) == 0


def test_free_gpus_count_placeholders_as_free_and_skip_nodes_not_ready():
    nodes = [node("a", 2, A100), node("b", 2, A100), node("c", 4, ready=False)]
    waiting = pod("carol", 2, selector=A100)
    pods = [pod("alice", 1, "a"), pod("placeholder", 1, "b", priority=-10), waiting]
    room = gpu_room(nodes, pods)
    assert (room.free, room.total, room.waiting, room.waiting_gpus) == (3, 4, 1, 2)


def test_a_smaller_profile_is_offered_only_where_it_fits_now():
    nodes = {"a": node("a", 2, A100), "b": node("b", 2, A100)}
    waiting = pod("carol", 2, selector=A100)
    pods = [pod("alice", 1, "a"), pod("bob", 1, "b"), waiting]
    fit = smaller_fit(waiting, PROFILES, nodes, pods)
    assert fit is not None and fit[0]["slug"] == "gpu-1" and fit[1] == 1
    # nothing free: nothing offered
    assert smaller_fit(waiting, PROFILES, nodes, [*pods, pod("dan", 1, "a"), pod("eve", 1, "b")]) is None
    # a free GPU of another product is not the waiting pod's to take
    other = {**nodes, "h": node("h", 1, {"nvidia.com/gpu.product": "NVIDIA-H100"})}
    assert smaller_fit(waiting, PROFILES, other, [*pods, pod("dan", 1, "a"), pod("eve", 1, "b")]) is None
    # a user waiting for 1 GPU has no smaller GPU profile
    assert smaller_fit(pod("fay", 1, selector=A100), PROFILES, nodes, pods) is None
