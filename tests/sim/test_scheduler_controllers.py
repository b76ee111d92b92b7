"""The simulated kube-scheduler, cluster autoscaler and user placeholders as controllers:
they run on a real Store and EventRecorder with a stand-in cluster (no API server or
kubelets). The scheduler's pure functions: test_scheduler.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim.controllers.autoscaler import Autoscaler, is_unschedulable
from gpu_reclaim_sim.controllers.placeholders import OWNER_LABEL, PlaceholderController
from gpu_reclaim_sim.events import EventRecorder
from gpu_reclaim_sim.kubelet.nodes import node_manifest
from gpu_reclaim_sim.resources import BY_KIND
from gpu_reclaim_sim.scheduler import scheduler as s
from gpu_reclaim_sim.store import Store

from ..support.scheduling import GPU, GPU_TAINT, node, pod

POD, NODE, EVENT = BY_KIND["Pod"], BY_KIND["Node"], BY_KIND["Event"]


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
