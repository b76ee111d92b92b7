"""The cluster autoscaler and z2jh's user placeholders on the real control plane (issue 37):
the agent's autoscaler (sim.nodeagent.clusterautoscaler) adds a node for a pod the real
kube-scheduler marked unschedulable and the scheduler places the pod there; an empty node
goes again; z2jh's placeholder StatefulSet (sim.userplaceholders), kept by the real
controller-manager, is preempted by a user pod through the real scheduler's preemption and its
recreated pod brings a node; and the GPU queue as the spawner words it from the real
scheduler's FailedScheduling messages."""

from __future__ import annotations

import datetime as dt

from kubernetes import client as k8s

from gpu_reclaim_sim.scenario import Placeholder
from gpu_reclaim_sim.userplaceholders import statefulset
from jupyterhub_gpu_reclaim.spawner import messages

from ..support.controlplane import admin_api
from ..support.sim_cluster import wait_for

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
USER = {"hub.jupyter.org/node-purpose": "user"}
QUICK = {"scaleUpDelay": "1s", "scaleDownDelay": "3s"}
SCENARIO = {
    "name": "autoscaler", "namespaces": [], "mode": "stub", "defaultImageSize": "10MB",
    "nodeGroups": [
        {"name": "user", "count": 1, "cpu": "2", "memory": "8Gi", "labels": USER},
        {"name": "user-new", "count": 0, "cpu": "2", "memory": "8Gi", "labels": USER,
         "autoscaler": {"min": 0, "max": 2, **QUICK}},
        {"name": "gpu", "count": 0, "cpu": "8", "memory": "32Gi", "gpus": 2, "taints": [TAINT],
         "labels": {"hub.jupyter.org/node-purpose": "gpu"}, "autoscaler": {"min": 0, "max": 1, **QUICK}},
    ],
}


def pod(name: str, *, gpus: int = 0, cpu: str = "100m", selector: dict | None = None) -> dict:
    resources = {"requests": {"cpu": cpu}, **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {})}
    return {"metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 0, "nodeSelector": selector or {},
        "tolerations": [{**TAINT, "operator": "Equal"}] if gpus else [],
        "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook", "resources": resources}]}}


def events(core: k8s.CoreV1Api, ns: str, name: str, reason: str) -> list[k8s.CoreV1Event]:
    return core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name},reason={reason}").items


def node_of(core: k8s.CoreV1Api, ns: str, name: str) -> str | None:
    """The node the pod runs on; None before it runs (or is made)."""
    found = core.list_namespaced_pod(ns, field_selector=f"metadata.name={name},status.phase=Running").items
    return found[0].spec.node_name if found else None


def test_a_pending_gpu_pod_brings_a_node_the_real_scheduler_places_it_on_and_the_empty_node_goes(agent, core, ns):
    core.create_namespaced_pod(ns, pod("notebook", gpus=1))
    [up] = wait_for(lambda: events(core, ns, "notebook", "TriggeredScaleUp"), "the TriggeredScaleUp event")
    assert up.message == "pod triggered scale-up: [{gpu 0->1 (max: 1)}]"
    assert up.source.component == "cluster-autoscaler"
    # before it: the real scheduler found no node (the user node lacks the GPU)
    assert any(e.message.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: ")
               for e in events(core, ns, "notebook", "FailedScheduling"))
    assert wait_for(lambda: node_of(core, ns, "notebook"), "the pod running") == "gpu-1"
    [scheduled] = events(core, ns, "notebook", "Scheduled")
    assert scheduled.message == f"Successfully assigned {ns}/notebook to gpu-1"
    assert core.read_node("gpu-1").status.allocatable["nvidia.com/gpu"] == "2"

    core.delete_namespaced_pod("notebook", ns)
    wait_for(lambda: "gpu-1" not in {n.metadata.name for n in core.list_node().items}, "the empty node removed")
    assert any(e.involved_object.name == "gpu-1" for e in core.list_namespaced_event(
        "default", field_selector="reason=ScaleDown").items)
    # the node the scenario started with, not autoscaled, stays
    assert "user-1" in {n.metadata.name for n in core.list_node().items}


def test_a_user_preempts_a_placeholder_whose_new_pod_brings_a_node(agent, core, ns):
    scheduling, apps = k8s.SchedulingV1Api(admin_api(agent.plane)), k8s.AppsV1Api(admin_api(agent.plane))
    priority = f"{ns}-placeholder"  # z2jh's user-placeholder priority
    scheduling.create_priority_class({"metadata": {"name": priority}, "value": -10})
    try:
        placeholder = Placeholder("user-placeholder", ns, 1, priority, {"cpu": "1500m", "memory": "1Gi"}, USER, [])
        apps.create_namespaced_stateful_set(ns, statefulset(placeholder))
        assert wait_for(lambda: node_of(core, ns, "user-placeholder-0"), "the placeholder running") == "user-1"
        first = core.read_namespaced_pod("user-placeholder-0", ns).metadata.uid

        core.create_namespaced_pod(ns, pod("student", cpu="1500m", selector=USER))
        # the real scheduler's preemption: the placeholder's room goes to the user
        assert wait_for(lambda: node_of(core, ns, "student"), "the user running") == "user-1"
        assert wait_for(lambda: events(core, ns, "user-placeholder-0", "Preempted"), "the Preempted event")
        # the StatefulSet makes the placeholder again; no node has room, so a node is added for it
        [up] = wait_for(lambda: [e for e in events(core, ns, "user-placeholder-0", "TriggeredScaleUp")
                                 if e.involved_object.uid != first], "a scale-up for the new placeholder")
        assert up.message == "pod triggered scale-up: [{user-new 0->1 (max: 2)}]"
        assert wait_for(lambda: node_of(core, ns, "user-placeholder-0"), "the placeholder running again") \
            == "user-new-1"
    finally:
        scheduling.delete_priority_class(priority)


def test_the_gpu_queue_is_worded_from_the_real_schedulers_messages(agent, core, ns):
    core.create_namespaced_pod(ns, pod("holder", gpus=2))
    assert wait_for(lambda: node_of(core, ns, "holder"), "the holder running", timeout=90) == "gpu-1"
    for name in ("first", "second"):
        core.create_namespaced_pod(ns, pod(name, gpus=1))
        wait_for(lambda n=name: events(core, ns, n, "FailedScheduling"), f"{name}'s FailedScheduling event")
    raw = admin_api(agent.plane).sanitize_for_serialization
    event = events(core, ns, "second", "FailedScheduling")[-1]  # another, should a node come or go meanwhile
    # the real scheduler's words: the GPU node is full, the user node(s) have no GPU
    assert event.message.startswith("0/") and " Insufficient nvidia.com/gpu. preemption: " in event.message
    # the autoscaler's: the GPU group is at its max
    [told] = wait_for(lambda: events(core, ns, "second", "NotTriggerScaleUp"), "the NotTriggerScaleUp event")
    assert told.message == "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu, 1 max node group size reached"
    pods = [raw(core.read_namespaced_pod(name, ns)) for name in ("first", "second")]
    now = dt.datetime.now(dt.timezone.utc)
    line = messages.translate_event(raw(event), pods[1], pods, now, lambda image: None)
    assert line is not None and line.startswith("Waiting for a free GPU (1 GPU requested, 1 request ahead of you, ")
    first_line = messages.translate_event(raw(events(core, ns, "first", "FailedScheduling")[0]), pods[0], pods,
                                          now, lambda image: None)
    assert first_line is not None and "no requests ahead of you" in first_line
