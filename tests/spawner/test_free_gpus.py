"""What the spawn form and a waiting user's page say of the GPUs, counted as the scheduler
counts them: placeholders' room is free, a smaller profile fits only where the waiting pod's
own placement (its GPU product) allows it."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.spawner.free_gpus import GpuRoom, ProfileRoom, gpu_room, profile_gpus, profile_room, smaller_fit
from jupyterhub_gpu_reclaim.spawner.messages import profile_room_message, room_message, smaller_fit_message

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100"}


MIG = "nvidia.com/mig-1g.10gb"


def node(name: str, gpus: int, labels: dict | None = None, ready: bool = True, resource: str = "nvidia.com/gpu") -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", resource: str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(name: str, gpus: int, node_name: str = "", priority: int = 0, selector: dict | None = None,
        resource: str = "nvidia.com/gpu") -> dict:
    p = {"metadata": {"name": name, "namespace": "jhub", "uid": name},
         "spec": {"priority": priority, "nodeSelector": selector or {},
                  "containers": [{"name": "notebook", "resources": {"limits": {resource: str(gpus)}}}]},
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
    assert profile_gpus({"kubespawner_override": {"extra_resource_guarantees": {MIG: "1"}}}) == 1
    for bad in ({"nvidia.com/gpu": "500m"}, {"nvidia.com/gpu": -1}, {"nvidia.com/gpu": None}, ["nvidia.com/gpu"]):
        assert profile_gpus({"kubespawner_override": {"extra_resource_limits": bad}}) == 0, bad


def test_free_gpus_count_placeholders_as_free_and_skip_nodes_not_ready():
    nodes = [node("a", 2, A100), node("b", 2, A100), node("c", 4, ready=False)]
    waiting = pod("carol", 2, selector=A100)
    pods = [pod("alice", 1, "a"), pod("placeholder", 1, "b", priority=-10), waiting]
    room = gpu_room(nodes, pods)
    assert (room.free, room.total, room.waiting, room.waiting_gpus) == ({"gpu": 3}, {"gpu": 4}, 1, {"gpu": 2})


def test_mig_slices_and_shared_gpus_are_counted_each_kind_apart():
    """The shared-gpus scenario's nodes (gpu_reclaim_sim/scenarios/shared-gpus.yaml): an A100
    cut into 7 MIG instances, a T4 time-sliced into 4 replicas, renamed or not."""
    nodes = [node("a", 2), node("mig", 7, resource=MIG), node("sliced", 4, resource="nvidia.com/gpu.shared"),
             node("t4", 2, {"nvidia.com/gpu.product": "Tesla-T4-SHARED"})]
    pods = [pod("alice", 1, "a"), *(pod(f"m{i}", 1, "mig", resource=MIG) for i in range(4)),
            pod("s", 1, "sliced", resource="nvidia.com/gpu.shared"), pod("t", 2, "t4"),
            pod("nia", 1, resource=MIG)]
    pods[-1]["status"]["conditions"][0]["message"] = f"0/4 nodes are available: 1 Insufficient {MIG}."
    room = gpu_room(nodes, pods)
    assert room == GpuRoom({"gpu": 1, "mig": 3, "shared": 3}, {"gpu": 2, "mig": 7, "shared": 6}, 1, {"mig": 1})
    assert room_message(room.free, room.total, room.waiting, room.waiting_gpus) == (
        "Free now: 1 of 2 GPUs, 3 of 7 MIG slices and 3 of 6 shared GPUs. Waiting for a GPU: 1 request (1 MIG slice).")
    whole = gpu_room([node("a", 4)], [pod("alice", 1, "a")])
    assert room_message(whole.free, whole.total, 0, {}) == "Free now: 3 of 4 GPUs. Waiting for a GPU: no one."


def test_a_smaller_profile_is_offered_only_where_it_fits_now():
    nodes = {"a": node("a", 2, A100), "b": node("b", 2, A100)}
    waiting = pod("carol", 2, selector=A100)
    pods = [pod("alice", 1, "a"), pod("bob", 1, "b"), waiting]
    fit = smaller_fit(waiting, PROFILES, nodes, pods)
    assert fit is not None and fit[0]["slug"] == "gpu-1" and fit[1] == {"gpu": 1}
    # nothing free: nothing offered
    assert smaller_fit(waiting, PROFILES, nodes, [*pods, pod("dan", 1, "a"), pod("eve", 1, "b")]) is None
    # a free GPU of another product is not the waiting pod's to take
    other = {**nodes, "h": node("h", 1, {"nvidia.com/gpu.product": "NVIDIA-H100"})}
    assert smaller_fit(waiting, PROFILES, other, [*pods, pod("dan", 1, "a"), pod("eve", 1, "b")]) is None
    # a user waiting for 1 GPU has no smaller GPU profile
    assert smaller_fit(pod("fay", 1, selector=A100), PROFILES, nodes, pods) is None


def test_a_smaller_profile_is_offered_by_the_kind_the_node_would_give():
    """The same resource is a whole GPU on one node and a time-sliced replica on another
    (GPU feature discovery's -SHARED product): the offer names what the user would get."""
    t4 = {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}
    sliced = [{"display_name": f"{n} × T4", "slug": f"t4-{n}",
               "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": n}}} for n in (1, 2, 4)]
    waiting = pod("tia", 4, selector=t4)
    fit = smaller_fit(waiting, sliced, {"t4": node("t4", 4, t4)}, [pod("tom", 1, "t4"), waiting])
    assert fit is not None and fit[0]["slug"] == "t4-2" and fit[1] == {"shared": 2}
    assert smaller_fit_message("2 × T4", fit[1]).startswith("2 shared GPUs are free now: “2 × T4” would start")
    mig = [{"display_name": f"{n} × MIG", "slug": f"mig-{n}",
            "kubespawner_override": {"extra_resource_limits": {MIG: n}}} for n in (1, 2)]
    waiting = pod("nia", 2, resource=MIG)
    fit = smaller_fit(waiting, mig, {"mig": node("mig", 2, resource=MIG)}, [pod("m", 1, "mig", resource=MIG), waiting])
    assert fit is not None and fit[1] == {"mig": 1}
    assert smaller_fit_message("1 × MIG", fit[1], "/hub/home") == (
        "1 MIG slice is free now: “1 × MIG” would start at once. To take it, stop this request on "
        '<a href="/hub/home">the hub\'s home page</a> (Stop My Server) and start that profile.')


def test_each_gpu_profile_says_whether_it_starts_now_on_the_nodes_it_may_use():
    """Counted on the nodes its override's placement allows (selector, tolerations), of the
    GPU resource it asks for; a profile without GPUs, or whose placement cannot be read,
    says nothing."""
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    mig_node = node("mig", 2, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, resource=MIG)
    mig_node["spec"]["taints"] = [taint]
    nodes = {"a": node("a", 2, A100), "h": node("h", 1, {"nvidia.com/gpu.product": "NVIDIA-H100"}), "mig": mig_node}
    pods = [pod("alice", 1, "a"), pod("m", 1, "mig", resource=MIG)]
    a100 = {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 1}, "node_selector": A100}}
    two = {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 2}, "node_selector": A100}}
    mig = {"kubespawner_override": {"extra_resource_limits": {MIG: "1"},
                                    "tolerations": [{**taint, "operator": "Equal"}]}}
    untolerated = {"kubespawner_override": {"extra_resource_limits": {MIG: "1"}}}
    assert profile_room(a100, nodes, pods) == ProfileRoom({"gpu": 1}, {"gpu": 2}, True)
    assert profile_room(two, nodes, pods) == ProfileRoom({"gpu": 1}, {"gpu": 2}, False)
    assert profile_room(mig, nodes, pods) == ProfileRoom({"mig": 1}, {"mig": 2}, True)
    assert profile_room(mig, nodes, [*pods, pod("n", 1, "mig", resource=MIG)]) == ProfileRoom({"mig": 0}, {"mig": 2}, False)
    assert profile_room(untolerated, nodes, pods) == ProfileRoom({}, {}, False)  # the taint keeps it off
    assert profile_room(PROFILES[0], nodes, pods) is None
    for bad in ({"node_selector": ["x"]}, {"tolerations": 3}, {"node_affinity_required": [{"matchExpressions": "x"}]}):
        broken = {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 1}, **bad}}
        assert profile_room(broken, nodes, pods) is None, bad
    assert profile_room_message({"gpu": 1}, {"gpu": 2}, True) == "Starts now: 1 of 2 GPUs free."
    assert profile_room_message({"mig": 0}, {"mig": 2}, False) == "Waits for a GPU: 0 of 2 MIG slices free."
    assert profile_room_message({}, {}, False) == "Waits for a GPU: no node that can run it is ready."
    # the spawner's placement where the override has none (the demo's node_selector)
    purpose = {"hub.jupyter.org/node-purpose": "user"}
    nodes["a"]["metadata"]["labels"].update(purpose)
    anywhere = {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 1}}}
    assert profile_room(anywhere, nodes, pods, {"node_selector": purpose}) == ProfileRoom({"gpu": 1}, {"gpu": 2}, True)
    assert profile_room(a100, nodes, pods, {"node_selector": {"other": "x"}}) == ProfileRoom({"gpu": 1}, {"gpu": 2}, True)
