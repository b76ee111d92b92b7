"""The simulated kube-scheduler's pure filter, score and preemption functions, checked
against upstream's formulas and wording (the controllers on a store:
test_scheduler_controllers.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpu_reclaim_sim.api.requests import pod_requests
from gpu_reclaim_sim.scheduler import facts as sfacts
from gpu_reclaim_sim.scheduler import filters as sfilters
from gpu_reclaim_sim.scheduler import preemption as spreemption
from gpu_reclaim_sim.scheduler import scores as sscores

from ..support.scheduling import GPU, GPU_TAINT, MiB, facts, node, pod, view

# --- requests --------------------------------------------------------------------------


def test_effective_requests_take_the_larger_of_containers_and_init_containers():
    p = pod("a", cpu="500m", memory="1Gi")
    p["spec"]["containers"].append({"name": "side", "image": "busybox",
                                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}})
    p["spec"]["initContainers"] = [
        {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}},
        {"name": "gpu-check", "image": "busybox", "resources": {"requests": {GPU: "1"}}},
    ]
    req = pod_requests(p)
    assert req["cpu"] == Fraction(2)  # the init container's 2 > 750m of the containers
    assert req["memory"] == 2 * 2**30  # the containers' 2Gi > 512Mi
    assert req[GPU] == 1  # held while the init container runs
    assert view(p).requests == {"cpu": 2000, "memory": 2 * 2**30, GPU: 1}


def test_sidecars_add_to_containers_and_to_later_init_containers_and_overhead_counts():
    p = pod("a", cpu="1")
    p["spec"]["initContainers"] = [
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "setup", "image": "busybox", "resources": {"requests": {"cpu": "1200m"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "100m"}
    # containers 1 + sidecar 0.5 = 1.5; init phase 1.2 + 0.5 = 1.7 wins; + overhead 0.1
    assert pod_requests(p)["cpu"] == Fraction(18, 10)


def test_scoring_counts_missing_cpu_and_memory_requests_as_the_upstream_defaults():
    v = view(pod("a", gpus=1))
    assert v.requests == {GPU: 1}
    assert (v.nonzero_cpu, v.nonzero_memory) == (100, 200 * MiB)


# --- filters ---------------------------------------------------------------------------


def test_gpu_insufficiency_counts_bound_and_terminating_pods_but_not_finished_ones():
    n = node("gpu-1", gpus=2)
    user = pod("jupyter-alice", gpus=1)
    running = pod("jupyter-bob", gpus=1, node_name="gpu-1", phase="Running")
    terminating = pod("jupyter-carol", gpus=1, node_name="gpu-1", phase="Running")
    terminating["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    done = pod("job", gpus=1, node_name="gpu-1", phase="Succeeded")
    assert sfilters.fit_failures(user, n, [running]) == []
    assert sfilters.fit_failures(user, n, [running, terminating]) == ["Insufficient nvidia.com/gpu"]
    assert sfilters.fit_failures(user, n, [running, done]) == []
    assert sfilters.fit_failures(user, node("cpu-1")) == ["Insufficient nvidia.com/gpu"]
    big = pod("big", cpu="16", memory="64Gi", gpus=1)
    assert sfilters.fit_failures(big, node("cpu-1")) == ["Insufficient cpu", "Insufficient memory",
                                                   "Insufficient nvidia.com/gpu"]
    full = node("tiny", pods=1)
    assert sfilters.fit_failures(pod("x"), full, [running]) == ["Too many pods"]



@pytest.mark.parametrize("tolerations, fits", [
    ([], False),
    ([{"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}], True),
    ([{"key": GPU, "value": "present"}], True),  # empty operator is Equal, empty effect any
    ([{"key": GPU, "operator": "Equal", "value": "absent"}], False),
    ([{"key": GPU, "operator": "Exists"}], True),
    ([{"operator": "Exists"}], True),  # empty key with Exists tolerates everything
    ([{"key": GPU, "operator": "Exists", "effect": "NoExecute"}], False),
])
def test_taints_need_a_matching_toleration(tolerations, fits):
    reasons = sfilters.fit_failures(pod("a", gpus=1, tolerations=tolerations), node("gpu-1", gpus=1, taints=[GPU_TAINT]))
    assert reasons == ([] if fits else ["node(s) had untolerated taint {nvidia.com/gpu: present}"])


def test_prefer_no_schedule_taints_do_not_filter_and_not_ready_nodes_are_tainted():
    soft = node("a", taints=[{"key": "spot", "value": "", "effect": "PreferNoSchedule"}])
    assert sfilters.fit_failures(pod("p"), soft) == []
    assert sfilters.fit_failures(pod("p"), node("b", ready="False")) == [
        "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
    assert sfilters.fit_failures(pod("p"), node("c", ready="Unknown")) == [
        "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"]


def test_cordoned_nodes_are_unschedulable_unless_tolerated_and_that_check_comes_first():
    cordoned = node("a", unschedulable=True, taints=[GPU_TAINT])
    assert sfilters.fit_failures(pod("p"), cordoned) == ["node(s) were unschedulable"]
    tolerant = pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                                     {"key": GPU, "operator": "Exists"}])
    assert sfilters.fit_failures(tolerant, cordoned) == []


def test_node_affinity_terms_are_ored_and_expressions_anded():
    n = node("gpu-1", labels={"accelerator": "a100", "gpu-mem": "40", "pool": "user"})
    aff = lambda *terms: {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}  # noqa: E731
    expr = lambda key, op, *values: {"key": key, "operator": op, **({"values": list(values)} if values else {})}  # noqa: E731
    fits = lambda a=None, sel=None: sfilters.fit_failures(pod("p", affinity=a, node_selector=sel), n) == []  # noqa: E731
    assert fits(aff({"matchExpressions": [expr("accelerator", "In", "a100", "h100"), expr("pool", "Exists")]}))
    assert not fits(aff({"matchExpressions": [expr("accelerator", "In", "a100"), expr("pool", "DoesNotExist")]}))
    assert fits(aff({"matchExpressions": [expr("accelerator", "In", "h100")]},
                    {"matchExpressions": [expr("gpu-mem", "Gt", "24")]}))
    assert not fits(aff({"matchExpressions": [expr("gpu-mem", "Lt", "24")]}))
    assert fits(aff({"matchExpressions": [expr("zone", "NotIn", "x")]}))  # a missing label is "not in"
    assert fits(aff({"matchFields": [expr("metadata.name", "In", "gpu-1")]}))
    assert not fits(aff({"matchFields": [expr("metadata.name", "NotIn", "gpu-1")]}))
    assert not fits(aff({}))  # an empty term matches no node
    assert not fits(sel={"accelerator": "h100"})
    assert fits(sel={"accelerator": "a100"})
    assert sfilters.fit_failures(pod("p", node_selector={"pool": "core"}), n) == [
        "node(s) didn't match Pod's node affinity/selector"]


# --- messages and preemption (pure) ---------------------------------------------------------


def test_failed_scheduling_message_with_preemption_suffix_is_worded_like_kube_scheduler():
    nodes = [node("cpu-1", labels={"pool": "cpu"}), node("gpu-1", gpus=1), node("gpu-2", gpus=1)]
    bound = [pod("jupyter-bob", gpus=1, node_name="gpu-1"), pod("jupyter-carol", gpus=1, node_name="gpu-2")]
    alice = view(pod("jupyter-alice", gpus=1, node_selector={"pool": "gpu"}))
    for n in nodes[1:]:
        n["metadata"]["labels"]["pool"] = "gpu"
    node_facts, usage = sfacts.snapshot(nodes, bound)
    fl = [node_facts[n] for n in sorted(node_facts)]
    statuses = {n.name: st for n in fl if (st := sfilters.filter_node(alice, n, usage.get(n.name, sfacts.Usage())))}
    result = spreemption.find_preemption(alice, fl, usage, statuses)
    assert result.node is None
    message = sfilters.fit_error_message(3, statuses.values(),
                                  "preemption: " + sfilters.fit_error_message(3, result.statuses.values()))
    assert message == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
        "1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.")


def test_reasons_are_sorted_as_count_prefixed_strings():
    st = [sfilters.Status(("Insufficient cpu",), False)] * 10 + [sfilters.Status(("Insufficient memory",), False)] * 2
    assert sfilters.fit_error_message(12, st) == "0/12 nodes are available: 10 Insufficient cpu, 2 Insufficient memory."


def test_victims_are_the_fewest_least_important_pods_and_the_node_with_cheapest_victims_wins():
    n1, n2 = node("gpu-1", gpus=2), node("gpu-2", gpus=2)
    old = pod("placeholder-0", gpus=1, priority=-10, node_name="gpu-1", start="2025-01-01T00:00:00Z")
    new = pod("placeholder-1", gpus=1, priority=-10, node_name="gpu-1", start="2025-01-02T00:00:00Z")
    user = pod("jupyter-bob", gpus=1, priority=0, node_name="gpu-2")
    low = pod("batch", gpus=1, priority=-5, node_name="gpu-2")
    node_facts, usage = sfacts.snapshot([n1, n2], [old, new, user, low])
    alice = view(pod("jupyter-alice", gpus=1, priority=0))
    starts = {v.uid: sfacts.start_time(p) for p, v in ((p, view(p)) for p in (old, new, user, low))}
    victims, status = spreemption.select_victims(alice, node_facts["gpu-1"], usage["gpu-1"], start_of=starts.get)
    assert status is None
    assert [v.name for v in victims] == ["placeholder-1"]  # the earlier-started one is reprieved
    statuses = {n: sfilters.Status(("Insufficient nvidia.com/gpu",), False) for n in node_facts}
    result = spreemption.find_preemption(alice, [node_facts["gpu-1"], node_facts["gpu-2"]], usage, statuses,
                               start_of=starts.get)
    assert result.node == "gpu-1"  # victims of priority -10 rather than -5
    none_lower = view(pod("sys", gpus=1, priority=-10))
    assert spreemption.select_victims(none_lower, node_facts["gpu-1"], usage["gpu-1"])[1] == sfilters.Status(
        ("No preemption victims found for incoming pod",), True)


# --- scores ----------------------------------------------------------------------------


def test_image_locality_follows_the_upstream_formula_with_normalised_names():
    size = 500 * MiB
    with_image = node("a", images={"docker.io/jupyter/scipy-notebook:latest": size})
    without = node("b")
    nodes = [facts(with_image), facts(without)]
    spread = sscores.image_spread(nodes)
    v = view(pod("p", image="jupyter/scipy-notebook"))  # normalised to docker.io/...:latest
    expected = 100 * (int(size * 1 / 2) - 23 * MiB) // (1000 * MiB - 23 * MiB)
    assert sscores.image_locality_score(v, nodes[0], spread, 2) == expected == 23
    assert sscores.image_locality_score(v, nodes[1], spread, 2) == 0
    # held everywhere and huge: clamped at 1000 MiB per container, full score
    huge = [facts(node(n, images={"docker.io/library/ubuntu:latest": 5 * 2**30})) for n in "xy"]
    assert sscores.image_locality_score(view(pod("p", image="ubuntu")), huge[0], sscores.image_spread(huge), 2) == 100
    # small images sit under the 23 MiB floor
    small = [facts(node("z", images={"docker.io/library/busybox:latest": 20 * MiB}))]
    assert sscores.image_locality_score(view(pod("p", image="busybox")), small[0], sscores.image_spread(small), 1) == 0


def _choose(strategy: str, p: dict, nodes: list[dict], bound: list[dict]) -> str:
    node_facts, usage = sfacts.snapshot(nodes, bound)
    fl = [node_facts[n] for n in sorted(node_facts)]
    scores = sscores.score_nodes(view(p), fl, usage, sscores.image_spread(fl), len(fl), strategy=strategy)
    return sscores.select_host(scores)


def test_most_allocated_packs_and_least_allocated_spreads():
    nodes = [node("a"), node("b")]
    bound = [pod("x", cpu="4", memory="16Gi", node_name="b")]
    new = pod("new", cpu="1", memory="4Gi")
    assert _choose("LeastAllocated", new, nodes, bound) == "a"
    assert _choose("MostAllocated", new, nodes, bound) == "b"
    assert sscores.resource_fit_score(view(new), facts(nodes[0]), sfacts.Usage(), "LeastAllocated") == 87
    assert sscores.resource_fit_score(view(new), facts(nodes[0]), sfacts.Usage(), "MostAllocated") == 12


def test_most_allocated_packs_gpus_for_gpu_pods():
    nodes = [node("gpu-1", gpus=4), node("gpu-2", gpus=4)]
    bound = [pod("bob", cpu="100m", memory="1Gi", gpus=2, node_name="gpu-2")]
    # cpu/memory barely differ; the GPU term makes gpu-2 the packed choice
    assert _choose("MostAllocated", pod("alice", cpu="100m", memory="1Gi", gpus=1), nodes, bound) == "gpu-2"
    assert _choose("LeastAllocated", pod("alice", cpu="100m", memory="1Gi", gpus=1), nodes, bound) == "gpu-1"


def test_preferred_affinity_and_prefer_no_schedule_taints_steer_the_choice():
    nodes = [node("a", labels={"disk": "ssd"}), node("b")]
    pref = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}
    assert _choose("LeastAllocated", pod("p", affinity=pref), nodes, []) == "a"
    tainted = [node("a", taints=[{"key": "spot", "effect": "PreferNoSchedule"}]), node("b")]
    assert _choose("LeastAllocated", pod("p"), tainted, []) == "b"
    assert sscores.default_normalize({"a": 1, "b": 0}, reverse=True) == {"a": 0, "b": 100}

