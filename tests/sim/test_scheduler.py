"""The simulated kube-scheduler, cluster autoscaler and user placeholders.

Pure filter/score/preemption functions are checked against upstream's formulas and
wording; the controllers run on a real Store and EventRecorder with a stand-in cluster
(no API server or kubelets)."""

from __future__ import annotations

import asyncio
import itertools
import time
from fractions import Fraction
from typing import Any

import pytest

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim import scheduler as s
from gpu_reclaim_sim.autoscaler import Autoscaler, is_unschedulable
from gpu_reclaim_sim.events import EventRecorder
from gpu_reclaim_sim.nodes import node_manifest
from gpu_reclaim_sim.placeholders import OWNER_LABEL, PlaceholderController
from gpu_reclaim_sim.resources import BY_KIND
from gpu_reclaim_sim.scheduling import facts as sfacts
from gpu_reclaim_sim.scheduling import filters as sfilters
from gpu_reclaim_sim.scheduling import preemption as spreemption
from gpu_reclaim_sim.scheduling import scores as sscores
from gpu_reclaim_sim.store import Store
from jupyterhub_gpu_reclaim.spawner import kube

POD, NODE, EVENT = BY_KIND["Pod"], BY_KIND["Node"], BY_KIND["Event"]
GPU = "nvidia.com/gpu"
MiB = 1024 * 1024
_uids = itertools.count(1)


# --- object builders -----------------------------------------------------------------


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0, pods: int = 110,
         labels: dict | None = None, taints: list | None = None, images: dict | None = None,
         ready: str | None = "True", unschedulable: bool = False) -> dict:
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    if gpus:
        capacity[GPU] = str(gpus)
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {"capacity": capacity, "allocatable": dict(capacity), "conditions": conditions,
                   "images": [{"names": [n], "sizeBytes": size} for n, size in (images or {}).items()]},
    }


def pod(name: str, *, ns: str = "jhub", cpu: str | None = None, memory: str | None = None, gpus: int = 0,
        priority: int = 0, node_name: str | None = None, image: str = "quay.io/jupyter/base-notebook:2025",
        tolerations: list | None = None, node_selector: dict | None = None, affinity: dict | None = None,
        phase: str = "Pending", grace: int = 30, policy: str = "PreemptLowerPriority",
        start: str | None = None) -> dict:
    requests: dict[str, Any] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if gpus:
        requests[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "notebook", "image": image, "resources": {"requests": requests}}],
        "priority": priority, "preemptionPolicy": policy, "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": grace, "tolerations": tolerations or [],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    status: dict[str, Any] = {"phase": phase}
    if start:
        status["startTime"] = start
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{next(_uids)}",
                         "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": spec, "status": status}


def view(p: dict) -> sfacts.PodView:
    return sfacts.PodView.from_pod(p)


def facts(n: dict) -> sfacts.NodeFacts:
    return sfacts.NodeFacts.from_node(n)


# --- requests --------------------------------------------------------------------------


def test_effective_requests_take_the_larger_of_containers_and_init_containers():
    p = pod("a", cpu="500m", memory="1Gi")
    p["spec"]["containers"].append({"name": "side", "image": "busybox",
                                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}})
    p["spec"]["initContainers"] = [
        {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}},
        {"name": "gpu-check", "image": "busybox", "resources": {"requests": {GPU: "1"}}},
    ]
    req = kube.pod_requests(p)
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
    assert kube.pod_requests(p)["cpu"] == Fraction(18, 10)


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


GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


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


# --- the Scheduler on a real store -------------------------------------------------------------


class StandInCluster:
    """What the controllers read from sim.cluster.Cluster, without API server or kubelets."""

    def __init__(self, data: dict | None = None) -> None:
        self.scenario = sc.from_dict(data or {"nodeGroups": [{"name": "gpu", "count": 0}]})
        self.store = Store()
        self.events = EventRecorder(self.store)
        self.images = None
        self.kubelets: dict[str, Any] = {}
        self.removed: list[str] = []
        for ns in ("default", "jhub"):
            self.store.create(BY_KIND["Namespace"], {"metadata": {"name": ns}})
        for pc in self.scenario.priority_classes:
            self.store.create(BY_KIND["PriorityClass"], {"metadata": {"name": pc["name"]}, "value": pc["value"]})

    def create(self, rtype, obj, namespace=None):
        spec = obj.setdefault("spec", {})
        if obj.get("kind") == "Pod":
            pcn = spec.get("priorityClassName")
            pc = self.store.find(BY_KIND["PriorityClass"], None, pcn) if pcn else None
            spec["priority"] = pc["value"] if pc else 0
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            obj.setdefault("status", {})["phase"] = "Pending"
        return self.store.create(rtype, obj, namespace)

    async def add_node(self, group) -> str:
        name = f"{group.name}-{sum(1 for n in self.store.objects(NODE) if n['metadata']['name'].startswith(group.name)) + 1}"
        self.store.create(NODE, node_manifest(name, group, self.scenario))
        return name

    async def remove_node(self, name: str) -> None:
        self.removed.append(name)
        self.store.remove(NODE, None, name)

    def add(self, obj: dict) -> dict:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "creationTimestamp")}
        return self.store.create(POD if obj["kind"] == "Pod" else NODE, obj)

    def pod(self, name: str, ns: str = "jhub") -> dict | None:
        return self.store.find(POD, ns, name)

    def events_for(self, name: str, reason: str) -> list[dict]:
        return [e for e in self.store.objects(EVENT)
                if e["involvedObject"]["name"] == name and e["reason"] == reason]


def condition(p: dict, type_: str = "PodScheduled") -> dict | None:
    return next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == type_), None)


async def until(predicate, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def cluster():
    c = StandInCluster({"nodeGroups": [{"name": "gpu", "count": 0}], "scheduler": {"retryInterval": 30}})
    c.scheduler = s.Scheduler(c)
    yield c
    await c.scheduler.stop()
    c.store.close()


async def test_binding_sets_node_condition_and_scheduled_event(cluster):
    cluster.add(node("cpu-1"))
    cluster.add(node("gpu-1", gpus=2, taints=[GPU_TAINT]))
    await cluster.scheduler.start()
    cluster.add(pod("jupyter-alice", gpus=1, tolerations=[{"key": GPU, "operator": "Exists"}]))
    await until(lambda: cluster.pod("jupyter-alice")["spec"].get("nodeName"))
    bound = cluster.pod("jupyter-alice")
    assert bound["spec"]["nodeName"] == "gpu-1"
    assert condition(bound)["status"] == "True"
    (ev,) = cluster.events_for("jupyter-alice", "Scheduled")
    assert ev["message"] == "Successfully assigned jhub/jupyter-alice to gpu-1"
    assert ev["source"]["component"] == "default-scheduler" and ev["type"] == "Normal"


async def test_unschedulable_pod_gets_condition_and_failed_scheduling_then_binds_when_a_gpu_frees(cluster):
    cluster.add(node("cpu-1", labels={"pool": "cpu"}))
    cluster.add(node("gpu-1", gpus=1))
    cluster.add(pod("jupyter-bob", gpus=1, node_name="gpu-1", phase="Running"))
    await cluster.scheduler.start()
    cluster.add(pod("jupyter-alice", gpus=1))
    await until(lambda: cluster.events_for("jupyter-alice", "FailedScheduling"))
    expected = ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
                "2 No preemption victims found for incoming pod.")
    cond = condition(cluster.pod("jupyter-alice"))
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", expected)
    (ev,) = cluster.events_for("jupyter-alice", "FailedScheduling")
    assert (ev["type"], ev["message"], ev["count"]) == ("Warning", expected, 1)
    assert is_unschedulable(cluster.pod("jupyter-alice"))

    cluster.scheduler.kick()  # a retry records the same event again: count + 1
    await until(lambda: cluster.events_for("jupyter-alice", "FailedScheduling")[0]["count"] == 2)
    assert not cluster.pod("jupyter-alice")["spec"].get("nodeName")

    cluster.store.remove(POD, "jhub", "jupyter-bob")  # its GPU is free once the object is gone
    await until(lambda: cluster.pod("jupyter-alice")["spec"].get("nodeName") == "gpu-1")
    assert condition(cluster.pod("jupyter-alice"))["status"] == "True"
    assert "reason" not in condition(cluster.pod("jupyter-alice"))


async def test_no_nodes_and_preemption_never_messages(cluster):
    await cluster.scheduler.start()
    cluster.add(pod("lonely"))
    await until(lambda: cluster.events_for("lonely", "FailedScheduling"))
    assert condition(cluster.pod("lonely"))["message"] == "no nodes available to schedule pods"
    cluster.add(node("gpu-1", gpus=1))
    cluster.add(pod("low", gpus=1, priority=-10, node_name="gpu-1"))
    cluster.add(pod("polite", gpus=1, priority=100, policy="Never"))
    await until(lambda: cluster.events_for("polite", "FailedScheduling"))
    assert condition(cluster.pod("polite"))["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: not eligible due to preemptionPolicy=Never.")
    assert cluster.pod("low")["metadata"].get("deletionTimestamp") is None
    await until(lambda: cluster.pod("lonely")["spec"].get("nodeName") == "gpu-1")  # retried on node add


async def test_user_preempts_a_lower_priority_placeholder_and_binds_once_it_is_gone(cluster):
    cluster.add(node("gpu-1", gpus=1))
    victim = cluster.add(pod("user-placeholder-0", gpus=1, priority=-10, node_name="gpu-1", phase="Running"))
    await cluster.scheduler.start()
    alice = cluster.add(pod("jupyter-alice", gpus=1, priority=0))
    await until(lambda: cluster.events_for("user-placeholder-0", "Preempted"))
    (ev,) = cluster.events_for("user-placeholder-0", "Preempted")
    assert ev["message"] == f"Preempted by pod {alice['metadata']['uid']} on node gpu-1"
    assert ev["source"]["component"] == "default-scheduler"
    gone = cluster.pod("user-placeholder-0")
    assert gone["metadata"]["deletionTimestamp"]  # graceful: 30 s, still counted
    assert condition(gone, "DisruptionTarget")["reason"] == "PreemptionByScheduler"
    waiting = cluster.pod("jupyter-alice")
    assert waiting["status"]["nominatedNodeName"] == "gpu-1"
    assert not waiting["spec"].get("nodeName")
    assert condition(waiting)["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."

    cluster.scheduler.kick()  # while the victim terminates, no further preemption
    await until(lambda: "terminating pod" in condition(cluster.pod("jupyter-alice"))["message"])
    assert condition(cluster.pod("jupyter-alice"))["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: not eligible due to a terminating pod on the nominated node.")
    assert len(cluster.events_for("user-placeholder-0", "Preempted")) == 1

    cluster.store.remove(POD, "jhub", victim["metadata"]["name"])  # the kubelet's final delete
    await until(lambda: cluster.pod("jupyter-alice")["spec"].get("nodeName") == "gpu-1")


async def test_higher_priority_pods_are_scheduled_first(cluster):
    cluster.add(node("gpu-1", gpus=1))
    cluster.add(pod("first-low", gpus=1, priority=-5, policy="Never"))
    cluster.add(pod("second-high", gpus=1, priority=10))
    await cluster.scheduler.start()
    await until(lambda: cluster.events_for("first-low", "FailedScheduling"))
    assert cluster.pod("second-high")["spec"]["nodeName"] == "gpu-1"


async def test_five_thousand_pods_on_sixty_nodes(cluster):
    for i in range(60):
        cluster.add(node(f"n-{i:02d}", cpu="16", memory="64Gi", pods=110))
    for i in range(5000):
        cluster.add(pod(f"stub-{i:04d}", cpu="100m", memory="128Mi"))
    # how fast is benchmarks/sim_scale.py's to measure (docs/benchmarks.md), not a timed assert's
    await cluster.scheduler.start()
    await until(lambda: not cluster.scheduler._pending, timeout=120)
    per_node = {}
    for p in cluster.store.objects(POD):
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert len(per_node) == 60 and max(per_node.values()) <= 110
    # a pass over 2,000 identical unschedulable pods reaches the last of them again
    for i in range(2000):
        cluster.add(pod(f"extra-{i:04d}", cpu="15"))
    await until(lambda: len(cluster.scheduler._unschedulable) == 2000, timeout=120)
    cluster.scheduler.kick()
    await until(lambda: cluster.events_for("extra-1999", "FailedScheduling")[0]["count"] >= 2, timeout=120)


# --- placeholders --------------------------------------------------------------------------

PLACEHOLDER_SCENARIO = {
    "namespaces": ["jhub"],
    "priorityClasses": [{"name": "jhub-default-priority", "value": 0, "globalDefault": True},
                        {"name": "jhub-user-placeholder-priority", "value": -10}],
    "nodeGroups": [{"name": "gpu", "count": 1, "gpus": 1}],
    "placeholders": [{"name": "user-placeholder", "namespace": "jhub", "count": 2,
                      "priorityClassName": "jhub-user-placeholder-priority",
                      "requests": {"cpu": "500m", "memory": "1Gi", GPU: 1},
                      "nodeSelector": {"hub.jupyter.org/node-purpose": "user"},
                      "tolerations": [{"key": GPU, "operator": "Exists"}]}],
    "scheduler": {"retryInterval": 30},
}


async def test_placeholders_are_kept_and_recreated_after_deletion():
    c = StandInCluster(PLACEHOLDER_SCENARIO)
    ctl = PlaceholderController(c)
    await ctl.start()
    try:
        pods = sorted(p["metadata"]["name"] for p in c.store.objects(POD))
        assert pods == ["user-placeholder-0", "user-placeholder-1"]
        p0 = c.pod("user-placeholder-0")
        assert p0["metadata"]["labels"]["component"] == "user-placeholder"
        assert p0["metadata"]["labels"]["app"] == "jupyterhub"
        assert p0["metadata"]["labels"][OWNER_LABEL] == "user-placeholder"
        spec = p0["spec"]
        assert spec["priority"] == -10 and spec["priorityClassName"] == "jhub-user-placeholder-priority"
        assert spec["terminationGracePeriodSeconds"] == 0
        assert spec["nodeSelector"] == {"hub.jupyter.org/node-purpose": "user"}
        assert spec["tolerations"] == [{"key": GPU, "operator": "Exists"}]
        (container,) = spec["containers"]
        assert container["image"] == "registry.k8s.io/pause:3.9"
        assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi", GPU: "1"},
                                          "limits": {GPU: "1"}}
        old_uid = p0["metadata"]["uid"]
        c.store.delete(POD, "jhub", "user-placeholder-0")  # unbound: removed at once
        await until(lambda: c.pod("user-placeholder-0") is not None)
        assert c.pod("user-placeholder-0")["metadata"]["uid"] != old_uid
        assert ctl.created == 3
    finally:
        await ctl.stop()


async def test_user_pod_evicts_a_placeholder_which_comes_back_pending():
    c = StandInCluster(PLACEHOLDER_SCENARIO)
    c.store.create(NODE, node_manifest("gpu-1", c.scenario.node_groups[0], c.scenario))
    c.store.update(NODE, None, "gpu-1",
                   lambda n: n["metadata"]["labels"].update({"hub.jupyter.org/node-purpose": "user"}))
    ctl, sched = PlaceholderController(c), s.Scheduler(c)
    await sched.start()
    await ctl.start()
    try:
        await until(lambda: any(p["spec"].get("nodeName") for p in c.store.objects(POD)))
        holder = next(p for p in c.store.objects(POD) if p["spec"].get("nodeName"))
        c.create(POD, pod("jupyter-alice", gpus=1), "jhub")
        await until(lambda: (c.pod("jupyter-alice") or {}).get("spec", {}).get("nodeName") == "gpu-1")
        name = holder["metadata"]["name"]
        assert c.events_for(name, "Preempted")
        await until(lambda: c.pod(name) is not None and c.pod(name)["metadata"]["uid"] != holder["metadata"]["uid"])
        await until(lambda: is_unschedulable(c.pod(name)))
        assert not c.pod(name)["spec"].get("nodeName")
    finally:
        await ctl.stop()
        await sched.stop()


# --- autoscaler ----------------------------------------------------------------------------

AUTOSCALING = {
    "namespaces": ["jhub"],
    "nodeGroups": [
        {"name": "user", "count": 1, "cpu": "2", "memory": "8Gi",
         "autoscaler": {"min": 1, "max": 3, "scaleUpDelay": 0.2, "scaleDownDelay": 0.3}},
        {"name": "fixed", "count": 1, "cpu": "2", "memory": "8Gi", "labels": {"pool": "fixed"}},
    ],
    "scheduler": {"retryInterval": 30},
}


async def test_autoscaler_adds_a_node_after_the_delay_and_removes_it_when_empty():
    c = StandInCluster(AUTOSCALING)
    for g in c.scenario.node_groups:
        await c.add_node(g)
    c.scheduler = s.Scheduler(c)
    scaler = Autoscaler(c, scan_interval=0.05)
    await c.scheduler.start()
    await scaler.start()
    try:
        sel = {"sim.jupyterhub-gpu-reclaim/node-group": "user"}
        c.add(pod("jupyter-a", cpu="1500m", node_selector=sel))
        started = time.monotonic()
        c.add(pod("jupyter-b", cpu="1500m", node_selector=sel))
        await until(lambda: c.events_for("jupyter-b", "TriggeredScaleUp"))
        (ev,) = c.events_for("jupyter-b", "TriggeredScaleUp")
        assert ev["message"] == "pod triggered scale-up: [{user 1->2 (max: 3)}]"
        assert ev["source"]["component"] == "cluster-autoscaler"
        await until(lambda: c.pod("jupyter-b")["spec"].get("nodeName") == "user-2")
        assert time.monotonic() - started >= 0.2
        assert len(c.events_for("jupyter-b", "TriggeredScaleUp")) == 1  # one scale-up, not one per scan
        # a pod no group can hold says why
        c.add(pod("too-big", cpu="4"))
        await until(lambda: c.events_for("too-big", "NotTriggerScaleUp"))
        assert c.events_for("too-big", "NotTriggerScaleUp")[0]["message"] == \
            "pod didn't trigger scale-up: 1 Insufficient cpu"
        # empty for scaleDownDelay: removed, but never below min and never the fixed group
        c.store.remove(POD, "jhub", "jupyter-b")
        await until(lambda: c.removed == ["user-2"])
        c.store.remove(POD, "jhub", "jupyter-a")
        await asyncio.sleep(0.6)
        assert c.removed == ["user-2"]
        assert {n["metadata"]["name"] for n in c.store.objects(NODE)} == {"user-1", "fixed-1"}
        assert c.events_for("user-2", "ScaleDown")
    finally:
        await scaler.stop()
        await c.scheduler.stop()


async def test_autoscaler_ignores_preemptors_and_expendable_pods_and_respects_max():
    c = StandInCluster({**AUTOSCALING, "nodeGroups": [
        {"name": "user", "count": 1, "cpu": "2", "memory": "8Gi",
         "autoscaler": {"min": 1, "max": 1, "scaleUpDelay": 0.1, "scaleDownDelay": 60}}]})
    await c.add_node(c.scenario.node_groups[0])
    c.add(pod("occupant", cpu="1", node_name="user-1", phase="Running"))
    scaler = Autoscaler(c, scan_interval=0.05)
    unsched = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}]}
    for name, prio, extra in (("expendable", -11, {}), ("preemptor", 0, {"nominatedNodeName": "user-1"}),
                              ("capped", 0, {})):
        p = pod(name, cpu="1500m", priority=prio)
        p["status"] = {**unsched, **extra}
        c.add(p)
    plan = scaler.scale_up()
    assert plan is not None and plan.scale_ups == []
    assert list(plan.not_helped.values()) == ["1 max node group size reached"]
    assert c.events_for("capped", "NotTriggerScaleUp")[0]["message"] == \
        "pod didn't trigger scale-up: 1 max node group size reached"
    assert not c.events_for("expendable", "NotTriggerScaleUp")
    assert not c.events_for("preemptor", "NotTriggerScaleUp")
