"""Spawn-progress lines for the GPU queue and image pulls.

sim_pods_gpu_queue.json is `kubectl get pods -o json` from the simulated cluster while
jupyter-waita (1 GPU) and jupyter-waitb (2 GPUs, created 2 s later) waited for GPUs; see
test_timings.py for how the sim_* fixtures were recorded.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib

import pytest

from jupyterhub_gpu_reclaim.durations import format_duration
from jupyterhub_gpu_reclaim.spawner.messages import (
    format_size,
    gpu_wait,
    gpu_wait_message,
    pull_message,
    queue_position,
    queue_timeout_message,
    requested_gpus,
    requested_kinds,
    translate_event,
)

DATA = pathlib.Path(__file__).parent / "data"
UTC = dt.timezone.utc
TAINT_ONLY = ("0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint "
              "{nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is not "
              "helpful for scheduling.")


def load(name: str):
    return json.loads((DATA / name).read_text())


@pytest.fixture
def pods() -> list[dict]:
    return load("sim_pods_gpu_queue.json")["items"]


def is_waiting_for_gpu(pod: dict) -> bool:
    return gpu_wait(pod) is not None


def waiting_since(pod: dict) -> dt.datetime | None:
    wait = gpu_wait(pod)
    return wait.since if wait else None


def by_name(pods: list[dict], name: str) -> dict:
    return next(p for p in pods if p["metadata"]["name"] == name)


def waiting_pod(name: str, created: str, priority: int = 0, message: str | None = None) -> dict:
    return {
        "metadata": {"name": name, "namespace": "jhub", "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {"priority": priority, "containers": [
            {"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastTransitionTime": created,
            "message": message or "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]},
    }


@pytest.mark.parametrize("gpus,ahead,seconds,text", [
    ({"gpu": 1}, 2, 150, "Waiting for a free GPU (1 GPU requested, 2 requests ahead of you, waiting 2 min)"),
    ({"gpu": 2}, 1, 40, "Waiting for a free GPU (2 GPUs requested, 1 request ahead of you, waiting 40 s)"),
    ({"gpu": 1}, 0, 0, "Waiting for a free GPU (1 GPU requested, no requests ahead of you, waiting 0 s)"),
    ({"gpu": 4}, 0, 3 * 3600 + 300,
     "Waiting for a free GPU (4 GPUs requested, no requests ahead of you, waiting 3 h 5 min)"),
    # each kind by its name (issue 39): a MIG slice or a shared GPU is not "a GPU"
    ({"mig": 1}, 0, 30, "Waiting for a free MIG slice (1 MIG slice requested, no requests ahead of you, waiting 30 s)"),
    ({"mig": 2}, 1, 90, "Waiting for a free MIG slice (2 MIG slices requested, 1 request ahead of you, waiting 1 min)"),
    ({"shared": 1}, 0, 5, "Waiting for a free shared GPU (1 shared GPU requested, no requests ahead of you, waiting 5 s)"),
    ({"shared": 2}, 0, 5,
     "Waiting for a free shared GPU (2 shared GPUs requested, no requests ahead of you, waiting 5 s)"),
    # several kinds at once (rare): each counted by its name, "a free GPU" for the one waited for
    ({"gpu": 1, "mig": 2}, 0, 5,
     "Waiting for a free GPU (1 GPU and 2 MIG slices requested, no requests ahead of you, waiting 5 s)"),
])
def test_gpu_wait_message(gpus, ahead, seconds, text):
    assert gpu_wait_message(gpus, ahead, dt.timedelta(seconds=seconds)) == text


@pytest.mark.parametrize("resource,product,kinds", [
    ("nvidia.com/gpu", "", {"gpu": 2}),
    ("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", {"gpu": 2}),
    ("nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB", {"mig": 2}),
    ("nvidia.com/gpu.shared", "", {"shared": 2}),  # renamed replicas (renameByDefault)
    ("nvidia.com/mig-1g.5gb.shared", "", {"shared": 2}),  # a MIG instance's replicas
    ("nvidia.com/gpu", "Tesla-T4-SHARED", {"shared": 2}),  # replicas under the plain name
])
def test_a_pending_pod_says_the_kind_it_waits_for_by_its_request(resource, product, kinds):
    """A pending pod has no node: its resource's name, or the GPU product its nodeSelector
    picks, says the kind."""
    pod = waiting_pod("jupyter-k", "2025-01-01T00:00:00Z", message=f"0/3 nodes are available: 3 Insufficient {resource}.")
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: "2"}}
    if product:
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
    assert requested_kinds(pod) == kinds
    assert requested_kinds({"spec": {"containers": [{"name": "c"}]}}) == {}
    pod["spec"]["containers"][0]["resources"]["limits"][resource] = "x"  # unreadable: none
    assert requested_kinds(pod) == {}


def test_format_duration():
    assert format_duration(dt.timedelta(seconds=59.9)) == "59 s"
    assert format_duration(dt.timedelta(seconds=60)) == "1 min"
    assert format_duration(dt.timedelta(hours=2)) == "2 h"
    assert format_duration(dt.timedelta(hours=1, minutes=5, seconds=59)) == "1 h 5 min"
    assert format_duration(26 * 3600 + 59) == "1 d 2 h" and format_duration(48 * 3600) == "2 d"
    assert format_duration(dt.timedelta(seconds=-3)) == "0 s" and format_duration(None) == ""


def test_is_waiting_for_gpu_on_sim_pods(pods):
    waiting = sorted(p["metadata"]["name"] for p in pods if is_waiting_for_gpu(p))
    assert waiting == ["jupyter-waita", "jupyter-waitb"]


def test_waiting_for_other_reasons_is_not_gpu():
    cpu_pod = waiting_pod("jupyter-cpu", "2025-01-01T00:00:00Z", message=TAINT_ONLY)
    assert not is_waiting_for_gpu(cpu_pod)
    assert waiting_since(cpu_pod) is None
    terminating = waiting_pod("jupyter-gone", "2025-01-01T00:00:00Z")
    terminating["metadata"]["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    assert not is_waiting_for_gpu(terminating)


def test_waiting_since(pods):
    assert waiting_since(by_name(pods, "jupyter-waitb")) == dt.datetime(2026, 12, 2, 22, 10, 4, tzinfo=UTC)
    assert waiting_since(by_name(pods, "jupyter-pull")) is None


def test_queue_position_on_sim_pods(pods):
    assert queue_position(by_name(pods, "jupyter-waita"), pods) == 0
    assert queue_position(by_name(pods, "jupyter-waitb"), pods) == 1
    assert requested_gpus(by_name(pods, "jupyter-waitb")) == 2


def test_queue_position_ties_priority_and_self():
    a = waiting_pod("jupyter-a", "2025-01-01T00:00:05Z")
    b = waiting_pod("jupyter-b", "2025-01-01T00:00:05Z")  # same second: the name decides
    early_low = waiting_pod("jupyter-low", "2025-01-01T00:00:01Z", priority=-10)
    early_high = waiting_pod("jupyter-high", "2025-01-01T00:00:02Z", priority=100)
    late = waiting_pod("jupyter-late", "2025-01-01T00:00:09Z")
    cpu = waiting_pod("jupyter-cpu", "2025-01-01T00:00:00Z", message=TAINT_ONLY)
    everyone = [a, b, early_low, early_high, late, cpu]
    assert queue_position(a, everyone) == 1  # early_high
    assert queue_position(b, everyone) == 2  # early_high, a
    assert queue_position(late, everyone) == 3
    assert queue_position(early_high, everyone) == 0  # lower priorities never count
    assert queue_position(a, []) == 0
    # the pod itself, as the reflector holds another copy of it
    assert queue_position(a, [copy.deepcopy(a)]) == 0
    # kube-scheduler's PrioritySort: a higher-priority pod that came later is ahead too
    late_high = waiting_pod("jupyter-late-high", "2025-01-01T00:00:30Z", priority=100)
    assert queue_position(a, everyone + [late_high]) == 2
    assert queue_position(late_high, everyone + [late_high]) == 1  # only early_high


MIG_SHORTAGE = ("0/3 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb, 2 node(s) had untolerated "
                "taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is not "
                "helpful for scheduling.")


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_a_mig_instance_or_a_replica_is_waited_for_as_a_gpu(resource):
    pod = waiting_pod("jupyter-mig", "2025-01-01T00:00:00Z",
                      message=f"0/3 nodes are available: 3 Insufficient {resource}.")
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    assert is_waiting_for_gpu(pod)
    assert waiting_since(pod) == dt.datetime(2025, 1, 1, tzinfo=UTC)
    assert requested_gpus(pod) == 1
    event = {"reason": "FailedScheduling", "message": MIG_SHORTAGE}
    text = translate_event(event, pod, [pod], dt.datetime(2025, 1, 1, 0, 0, 30, tzinfo=UTC), lambda _: None)
    kind = "MIG slice" if "mig" in resource else "shared GPU"
    assert text == f"Waiting for a free {kind} (1 {kind} requested, no requests ahead of you, waiting 30 s)"


def test_only_a_gpu_resource_short_is_a_wait_for_a_gpu():
    for message in (TAINT_ONLY, "0/1 nodes are available: 1 Insufficient nvidia.com/gpux.",
                    "0/1 nodes are available: 1 Insufficient example.com/nvidia.com/gpu.",
                    "0/1 nodes are available: 1 Insufficient memory."):
        assert not is_waiting_for_gpu(waiting_pod("jupyter-x", "2025-01-01T00:00:00Z", message=message)), message
    assert is_waiting_for_gpu(waiting_pod("jupyter-x", "2025-01-01T00:00:00Z", message=MIG_SHORTAGE))


def test_requested_gpus():
    pod = waiting_pod("x", "2025-01-01T00:00:00Z")
    pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {"nvidia.com/gpu": 1}}})
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]
    assert requested_gpus(pod) == 3
    assert requested_gpus({"spec": {"containers": [{"name": "c"}]}}) == 0
    # MIG instances of two profiles and a replica each count; other resources do not
    pod["spec"]["containers"] = [{"name": "a", "resources": {"limits": {
        "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": 1, "cpu": "4", "example.com/gpu": "9"}}},
        {"name": "b", "resources": {"requests": {"nvidia.com/gpu.shared": "1"}}}]
    pod["spec"]["initContainers"] = []
    assert requested_gpus(pod) == 4
    # a pod it cannot read asks for none here, and waits for nothing (the service holds it)
    pod["spec"]["containers"][1]["resources"]["limits"] = {"nvidia.com/gpu": "x"}
    assert requested_gpus(pod) == 0 and gpu_wait(pod) is None


def test_pull_message():
    assert pull_message("quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02", 5_000_000_000, "gpu-1") == \
        "Downloading the environment image (5.0 GB) on node gpu-1"
    assert pull_message("x", None, "gpu-1") == "Downloading the environment image on node gpu-1"
    assert pull_message("x", 744_000_000, "") == "Downloading the environment image (744 MB)"
    assert format_size(1_100_000_000) == "1.1 GB" and format_size(744_000) == "744 kB"


def test_queue_timeout_message():
    text = queue_timeout_message(dt.timedelta(minutes=10, seconds=3), {"gpu": 1})
    assert text == ("No GPU became free within 10 min; your request for 1 GPU was withdrawn. "
                    "Try again later or choose a CPU profile.")
    assert "request for 2 GPUs was" in queue_timeout_message(dt.timedelta(minutes=30), {"gpu": 2})
    assert queue_timeout_message(dt.timedelta(seconds=8), {"mig": 2}).startswith(
        "No MIG slice became free within 8 s; your request for 2 MIG slices was withdrawn.")
    assert queue_timeout_message(dt.timedelta(seconds=8), {"shared": 1}).startswith(
        "No shared GPU became free within 8 s; your request for 1 shared GPU was withdrawn.")


def test_translate_failed_scheduling(pods):
    waita_events = load("sim_events_waita.json")["items"]
    failed = next(e for e in waita_events if e["reason"] == "FailedScheduling")
    waitb = by_name(pods, "jupyter-waitb")
    event = dict(failed, involvedObject=dict(failed["involvedObject"], name="jupyter-waitb"))
    now = dt.datetime(2026, 12, 2, 22, 12, 34, tzinfo=UTC)
    assert translate_event(event, waitb, pods, now, lambda image: None) == \
        "Waiting for a free GPU (2 GPUs requested, 1 request ahead of you, waiting 2 min)"


def test_translate_failed_scheduling_after_binding():
    # a late reader sees the old FailedScheduling after the pod was bound: the event's span
    pod = load("sim_pod_waita.json")
    failed = next(e for e in load("sim_events_waita.json")["items"] if e["reason"] == "FailedScheduling")
    text = translate_event(failed, pod, [], dt.datetime(2030, 1, 1, tzinfo=UTC), lambda image: None)
    assert text == "Waiting for a free GPU (1 GPU requested, no requests ahead of you, waiting 16 s)"


def test_translate_pulling():
    pod = load("sim_pod_pull.json")
    pulling = next(e for e in load("sim_events_pull.json")["items"] if e["reason"] == "Pulling")
    sizes = {"quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02": 5_000_000_000}
    assert translate_event(pulling, pod, [], dt.datetime.now(UTC), sizes.get) == \
        "Downloading the environment image (5.0 GB) on node gpu-1"

    def broken(image: str) -> int | None:
        raise RuntimeError("no nodes")
    assert translate_event(pulling, pod, [], dt.datetime.now(UTC), broken) == \
        "Downloading the environment image on node gpu-1"


def test_translate_keeps_other_events(pods):
    for event in load("sim_events_pull.json")["items"]:
        if event["reason"] != "Pulling":
            assert translate_event(event, load("sim_pod_pull.json"), pods, dt.datetime.now(UTC), lambda i: None) is None
    cpu = waiting_pod("jupyter-cpu", "2025-01-01T00:00:00Z", message=TAINT_ONLY)
    event = {"reason": "FailedScheduling", "message": TAINT_ONLY, "involvedObject": {"name": "jupyter-cpu"}}
    assert translate_event(event, cpu, [cpu], dt.datetime.now(UTC), lambda i: None) is None


@pytest.mark.parametrize("gpus,said", [
    ({"gpu": 1}, "a GPU is expected to be free in about 3 min"),
    ({"gpu": 2}, "a GPU is expected to be free in about 3 min"),
    ({"mig": 2}, "a MIG slice is expected to be free in about 3 min"),
    ({"shared": 1}, "a shared GPU is expected to be free in about 3 min"),
])
def test_gpu_wait_message_says_when_a_gpu_is_expected_only_when_told(gpus, said):
    now = dt.datetime(2026, 12, 5, 13, 23, tzinfo=UTC)
    text = gpu_wait_message(gpus, 0, dt.timedelta(minutes=2), now + dt.timedelta(minutes=3), now)
    assert text.endswith(" requested, no requests ahead of you, waiting 2 min); " + said)
    assert "expected" not in gpu_wait_message(gpus, 0, dt.timedelta(minutes=2))
