"""The pod facts (signals/pod_facts.py) the reclaim service and the spawner both read: a pod's
GPUs as Kubernetes counts its effective request, and whether and since when it waits for a
GPU. The service's pending GPUs and GPU queue and the spawner's "waiting for a free GPU" line
used to be decided by two rules that disagreed on the pods below; now they are one."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from jupyterhub_gpu_reclaim.service.status import waiting_servers
from jupyterhub_gpu_reclaim.signals import pod_facts
from jupyterhub_gpu_reclaim.signals.pod_facts import GpuWait, gpu_requests, gpu_wait
from jupyterhub_gpu_reclaim.signals.pods import PodSignal, pod_info
from jupyterhub_gpu_reclaim.spawner import messages

UTC = dt.timezone.utc
CREATED = "2026-03-01T10:00:00Z"
UNSCHEDULABLE_AT = "2026-03-01T10:00:01Z"
SHORT = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: " \
        "3 No preemption victims found for incoming pod."


def gpus(n: int | str) -> dict:
    return {"limits": {"cpu": "2", "nvidia.com/gpu": str(n)}}


def waiting(name: str, containers: list[dict] | None = None, init: list[dict] | None = None,
            message: str = SHORT, reason: str = "Unschedulable") -> dict:
    """A KubeSpawner pod the scheduler could not place (its JSON form)."""
    return {
        "metadata": {"name": name, "namespace": "jhub", "uid": f"uid-{name}", "creationTimestamp": CREATED,
                     "labels": {"component": "singleuser-server", "hub.jupyter.org/username": name},
                     "annotations": {"hub.jupyter.org/username": name, "hub.jupyter.org/servername": ""}},
        "spec": {"containers": containers if containers is not None else [{"name": "notebook", "resources": gpus(1)}],
                 **({"initContainers": init} if init is not None else {})},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastTransitionTime": UNSCHEDULABLE_AT}]},
    }


def test_a_pods_gpus_are_its_effective_request():
    """kube-scheduler places a pod by its effective request, and the node keeps it reserved
    (https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/):
    the containers and sidecars summed, or the largest init container with the sidecars
    started before it, whichever is more; plus the overhead."""
    assert gpu_requests(waiting("plain")) == {"nvidia.com/gpu": 1}
    init_only = waiting("init", containers=[{"name": "notebook"}], init=[{"name": "warmup", "resources": gpus(1)}])
    assert gpu_requests(init_only) == {"nvidia.com/gpu": 1}
    sidecar = waiting("sidecar", init=[{"name": "monitor", "restartPolicy": "Always", "resources": gpus(1)}])
    assert gpu_requests(sidecar) == {"nvidia.com/gpu": 2}
    big_init = waiting("big-init", init=[{"name": "monitor", "restartPolicy": "Always", "resources": gpus(1)},
                                         {"name": "load", "resources": gpus(2)}])
    assert gpu_requests(big_init) == {"nvidia.com/gpu": 3}  # the init container runs beside the sidecar
    mig = waiting("mig", containers=[{"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}},
                                     {"name": "b", "resources": {"requests": {"nvidia.com/gpu.shared": "1"},
                                                                 "limits": {"nvidia.com/gpu.shared": "1"}}}])
    assert gpu_requests(mig) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu.shared": 1}
    assert pod_facts.requested_gpus(mig) == 3
    assert gpu_requests(waiting("cpu", containers=[{"name": "notebook", "resources": {"limits": {"cpu": "4"}}}])) == {}


@pytest.mark.parametrize("value", ["x", "0.5", "-1", "1e400", True])
def test_a_gpu_quantity_that_is_no_count_is_malformed(value):
    pod = waiting("bad", containers=[{"name": "notebook", "resources": {"limits": {"nvidia.com/mig-1g.10gb": value}}}])
    with pytest.raises(ValueError, match="nvidia.com/mig-1g.10gb: .* is not a GPU count"):
        gpu_requests(pod)
    assert pod_info(pod).invalid and messages.gpu_wait(pod) is None  # held by the service; no queue line


def test_waiting_for_a_gpu():
    assert gpu_wait(waiting("w")) == GpuWait({"gpu": 1}, since=dt.datetime(2026, 3, 1, 10, 0, 1, tzinfo=UTC))
    no_transition = waiting("w")
    del no_transition["status"]["conditions"][0]["lastTransitionTime"]
    assert gpu_wait(no_transition) == GpuWait({"gpu": 1}, since=dt.datetime(2026, 3, 1, 10, tzinfo=UTC))

    def changed(**changes) -> dict:
        pod = waiting("w")
        for path, value in changes.items():
            *parents, key = path.split("__")
            target = pod
            for p in parents:
                target = target[p][0] if isinstance(target[p], list) else target[p]
            target[key] = value
        return pod

    not_waiting = {
        "bound": changed(spec__nodeName="gpu-1"),
        "being deleted": changed(metadata__deletionTimestamp="2026-03-01T10:05:00Z"),
        "past Pending": changed(status__phase="Failed"),
        "gated": changed(status__conditions__reason="SchedulingGated"),
        "scheduled": changed(status__conditions__status="True"),
        "short of memory": changed(status__conditions__message="0/3 nodes are available: 3 Insufficient memory."),
        "kept off GPU nodes": changed(status__conditions__message="0/3 nodes are available: 3 node(s) had "
                                                                  "untolerated taint {nvidia.com/gpu: present}."),
        "asking for none": changed(spec__containers=[{"name": "notebook"}]),
    }
    assert {why: gpu_wait(pod) for why, pod in not_waiting.items()} == dict.fromkeys(not_waiting)


def test_the_service_and_the_spawner_see_the_same_gpu_queue():
    """The old disagreements: a pod being deleted was pending GPU demand for the service but
    not in the spawner's queue; a pod asking for its GPU in an init container was in the
    spawner's queue but no demand for the service; a sidecar's GPU was counted by neither;
    the service's queue counted the wait from the pod's creation, the spawner from the
    scheduler's condition. Now each pod waits, for as many GPUs and since the same time, in both."""
    deleting = waiting("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-03-01T10:05:00Z"
    deleting["metadata"]["finalizers"] = ["example.com/keep"]  # what keeps an unbound pod being deleted
    pods = [
        waiting("plain"),
        deleting,
        waiting("init-gpu", containers=[{"name": "notebook"}], init=[{"name": "warmup", "resources": gpus(1)}]),
        waiting("sidecar", init=[{"name": "monitor", "restartPolicy": "Always", "resources": gpus(1)}]),
        waiting("gated", reason="SchedulingGated"),
    ]
    signal = PodSignal("jhub")
    signal.synced.set()
    for pod in pods:
        signal._apply({"type": "ADDED", "object": copy.deepcopy(pod)})
    service = {p.name: p.gpu_wait for p in signal.pods_now().values()}
    spawner = {p["metadata"]["name"]: messages.gpu_wait(p) for p in pods}
    since = dt.datetime(2026, 3, 1, 10, 0, 1, tzinfo=UTC)
    expected = {"plain": GpuWait({"gpu": 1}, since), "deleting": None, "init-gpu": GpuWait({"gpu": 1}, since),
                "sidecar": GpuWait({"gpu": 2}, since), "gated": None}
    assert service == spawner == expected
    assert signal.snapshot(60).pending_gpus == sum(w.gpus for w in spawner.values() if w) == 4

    # the admin page's GPU queue and each user's spawn page: the same pods, GPUs and wait
    now = since + dt.timedelta(minutes=3)
    queue = waiting_servers(signal.pods_now().values(), now)
    assert sorted((q.user, q.gpus, q.since, q.waited_s) for q in queue) == [
        ("init-gpu", 1, since, 180.0), ("plain", 1, since, 180.0), ("sidecar", 2, since, 180.0)]
    lines = {p["metadata"]["name"]: messages.translate_event(
        {"reason": "FailedScheduling", "message": SHORT}, p, pods, now, lambda _: None) for p in pods}
    assert lines["sidecar"] == "Waiting for a free GPU (2 GPUs requested, 2 requests ahead of you, waiting 3 min)"
    assert lines["init-gpu"] == "Waiting for a free GPU (1 GPU requested, no requests ahead of you, waiting 3 min)"
    assert len(queue) == 1 + max(messages.queue_position(p, pods) for p in pods if spawner[p["metadata"]["name"]])


def test_the_service_and_the_spawner_order_the_queue_alike():
    """The old disagreement: the admin page's queue (and whom the service expects a freed
    GPU to go to) ran longest waiting first, while the spawner told a resumed session (a
    higher-priority pod) that no request was ahead of it. Now both go by priority, then the
    longest waiting, then the name."""
    early, late, resumed, twin = waiting("early"), waiting("late"), waiting("resumed"), waiting("twin")
    late["status"]["conditions"][0]["lastTransitionTime"] = "2026-03-01T10:02:00Z"
    resumed["status"]["conditions"][0]["lastTransitionTime"] = "2026-03-01T10:05:00Z"
    resumed["spec"]["priority"] = 1000
    pods = [late, twin, resumed, early]  # early and twin: the same second, so the name decides
    infos = [pod_info(copy.deepcopy(p)) for p in pods]
    now = dt.datetime(2026, 3, 1, 10, 10, tzinfo=UTC)
    service = [q.user for q in waiting_servers(infos, now)]
    spawner = sorted((p["metadata"]["name"] for p in pods),
                     key=lambda name: messages.queue_position(next(p for p in pods if p["metadata"]["name"] == name),
                                                              pods))
    assert service == spawner == ["resumed", "early", "twin", "late"]
    assert [messages.queue_position(p, pods) for p in (resumed, early, twin, late)] == [0, 1, 2, 3]
