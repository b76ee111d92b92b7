"""Spawn phase timings from a pod and its events.

Fixtures in tests/spawner/data/:
- sim_pod_*.json / sim_events_*.json were recorded from the project's simulated cluster
  (`jupyterhub-gpu-reclaim-sim run --config tests/spawner/data/sim_scenario.yaml`: stub mode,
  1GB/s pulls) with `kubectl get pod NAME -o json` and
  `kubectl get events --field-selector involvedObject.name=NAME -o json`, for GPU pods
  built like KubeSpawner's (container "notebook", user node selector, GPU toleration):
  - pull: quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02 (5 GB, not on the node:
    a 5 s pull), IfNotPresent;
  - present: quay.io/jupyterhub/singleuser:latest, pre-pulled, IfNotPresent ("already
    present on machine");
  - always: the same image with KubeSpawner's default pull policy (none, so the server's
    Always for :latest): a 100 ms "pull" of the cached image;
  - waita: created while all 4 GPUs were taken (FailedScheduling ×5), scheduled 16 s later
    when a GPU pod was deleted, then pulled the 5 GB image;
  - sim_pods_gpu_queue.json: `kubectl get pods -o json` while two pods waited for GPUs.
- handmade_gpu_wait_pull_retry.json is hand-made to look like a real cluster (see its
  _comment): second-precision kubelet events, microsecond scheduler eventTime, repeated and
  out-of-order events, an init container's pull, and events of an older pod of the same name.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest

from jupyterhub_gpu_reclaim.spawner.timings import (
    SpawnTimings,
    event_first_time,
    event_last_time,
    extract,
    parse_go_duration,
)
from jupyterhub_gpu_reclaim.timestamps import parse_time_lenient

DATA = pathlib.Path(__file__).parent / "data"
UTC = dt.timezone.utc


def load(name: str):
    return json.loads((DATA / name).read_text())


def sim(case: str, hub_lead: float = 0.3) -> tuple[dict, list[dict], dt.datetime]:
    pod = load(f"sim_pod_{case}.json")
    events = load(f"sim_events_{case}.json")["items"]
    # the hub asks a moment before the API server stamps the pod
    requested = parse_time_lenient(pod["metadata"]["creationTimestamp"]) - dt.timedelta(seconds=hub_lead)
    return pod, events, requested


def check_consistent(t: SpawnTimings) -> dict[str, float]:
    phases = t.phases()
    assert all(v >= 0 for v in phases.values()), phases
    parts = sum(v for k, v in phases.items() if k != "total")
    assert parts <= phases["total"] + 1e-9
    return phases


def test_sim_pull():
    pod, events, requested = sim("pull")
    t = extract(pod, events, requested)
    assert t.image_pulled is True
    assert t.image == "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02"
    assert t.image_size == 5_000_000_000
    phases = check_consistent(t)
    assert set(phases) == {"create", "schedule", "pull", "start", "ready", "total"}
    # 5 GB at 1GB/s; event times have whole seconds
    assert phases["pull"] == pytest.approx(5.0, abs=1.0)
    assert phases["create"] == pytest.approx(0.3)
    assert phases["total"] >= phases["pull"]


def test_sim_present():
    pod, events, requested = sim("present")
    t = extract(pod, events, requested)
    assert t.image_pulled is False
    assert t.pull_started is None and t.pulled is not None
    phases = check_consistent(t)
    assert phases["pull"] == 0.0
    assert phases["total"] < 2


def test_sim_always_policy_on_a_cached_image_is_no_pull():
    # pullPolicy Always (KubeSpawner's default for :latest) re-"pulls" a cached image: the
    # kubelet emits Pulling and "Successfully pulled … in 100ms", but nothing was downloaded
    pod, events, requested = sim("always")
    t = extract(pod, events, requested)
    assert t.pull_started is not None
    assert t.image_pulled is False
    assert check_consistent(t)["pull"] == 0.0


def test_always_policy_with_a_real_download_is_a_pull():
    pod, events, requested = sim("always")
    slow = [dict(e, message=e["message"].replace("in 100ms (100ms", "in 1m2.5s (1m2.5s"))
            if e["reason"] == "Pulled" else e for e in events]
    assert extract(pod, slow, requested).image_pulled is True


def test_sim_waited_for_gpu():
    pod, events, requested = sim("waita")
    t = extract(pod, events, requested)
    phases = check_consistent(t)
    failed = [e for e in events if e["reason"] == "FailedScheduling"][0]
    # the wait runs from creation to the PodScheduled transition, not to the last retry
    assert phases["schedule"] == (t.scheduled - t.created).total_seconds() >= 10
    assert t.scheduled >= event_last_time(failed)
    assert t.image_pulled and phases["pull"] == pytest.approx(5.0, abs=1.0)


def test_handmade_real_cluster():
    doc = load("handmade_gpu_wait_pull_retry.json")
    t = extract(doc["pod"], doc["events"], parse_time_lenient(doc["requested"]))
    at = lambda s: dt.datetime.fromisoformat(s).replace(tzinfo=UTC)  # noqa: E731
    assert t.created == at("2025-06-10T09:00:03")
    assert t.scheduled == at("2025-06-10T09:03:47")  # the condition, not the 09:03:47.25 event
    assert t.pull_started == at("2025-06-10T09:03:50")  # the first of the repeated Pulling
    assert t.pulled == at("2025-06-10T09:05:12")
    assert t.started == at("2025-06-10T09:05:13")
    assert t.ready == at("2025-06-10T09:05:16")
    assert t.image_pulled is True  # the init container's "already present" does not count
    assert t.image_size == 5123456789
    phases = check_consistent(t)
    assert phases == pytest.approx({"create": 0.4, "schedule": 224.0, "pull": 82.0, "start": 1.0,
                                    "ready": 3.0, "total": 313.4})


def test_events_of_an_older_pod_are_ignored():
    doc = load("handmade_gpu_wait_pull_retry.json")
    old = [e for e in doc["events"] if e["involvedObject"]["uid"] != doc["pod"]["metadata"]["uid"]]
    assert old
    t = extract(doc["pod"], old, parse_time_lenient(doc["requested"]))
    assert t.pulled is None and t.pull_started is None and not t.image_pulled


def test_event_order_does_not_matter():
    doc = load("handmade_gpu_wait_pull_retry.json")
    req = parse_time_lenient(doc["requested"])
    assert extract(doc["pod"], doc["events"], req) == extract(doc["pod"], doc["events"][::-1], req)


def test_pull_from_message_when_pulling_event_is_gone():
    doc = load("handmade_gpu_wait_pull_retry.json")
    events = [e for e in doc["events"] if e["reason"] != "Pulling"]
    t = extract(doc["pod"], events, parse_time_lenient(doc["requested"]))
    assert t.image_pulled
    assert t.phases()["pull"] == pytest.approx(41.2)


def test_second_truncation_never_gives_negative_phases():
    pod, events, _ = sim("present")
    # the hub's clock says 0.7 s after the (truncated) creationTimestamp
    requested = parse_time_lenient(pod["metadata"]["creationTimestamp"]) + dt.timedelta(seconds=0.7)
    phases = check_consistent(extract(pod, events, requested))
    assert phases["create"] == 0.0


def test_state_and_annotation_round_trip():
    for case in ("pull", "present", "waita"):
        pod, events, requested = sim(case)
        t = extract(pod, events, requested)
        state = json.loads(json.dumps(t.to_state()))
        assert SpawnTimings.from_state(state) == t
        annotations = json.loads(json.dumps(t.to_annotations()))
        assert SpawnTimings.from_state(annotations) == t
        assert annotations["phases"]["total"] == round(t.phases()["total"], 3)
        assert state["requested"].endswith("Z")


def test_log_fields():
    pod, events, requested = sim("pull")
    fields = extract(pod, events, requested).log_fields()
    assert fields["image_pulled"] is True and fields["pull_s"] == pytest.approx(5.0, abs=1.0)
    assert {"create_s", "schedule_s", "start_s", "ready_s", "total_s", "image"} <= set(fields)
    json.dumps(fields)


def test_partial_spawn_has_only_known_phases():
    pod = load("sim_pods_gpu_queue.json")["items"]
    waiting = next(p for p in pod if p["metadata"]["name"] == "jupyter-waitb")
    t = extract(waiting, [], parse_time_lenient(waiting["metadata"]["creationTimestamp"]))
    assert t.phases() == {"create": 0.0}
    assert SpawnTimings().phases() == {}


def test_event_times():
    legacy = {"eventTime": None, "firstTimestamp": "2025-01-01T00:00:01Z", "lastTimestamp": "2025-01-01T00:00:09Z"}
    modern = {"eventTime": "2025-01-01T00:00:01.500000Z", "firstTimestamp": None, "lastTimestamp": None,
              "series": {"count": 3, "lastObservedTime": "2025-01-01T00:00:07.250000Z"}}
    assert event_first_time(legacy) == dt.datetime(2025, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert event_last_time(legacy) == dt.datetime(2025, 1, 1, 0, 0, 9, tzinfo=UTC)
    assert event_first_time(modern) == dt.datetime(2025, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert event_last_time(modern) == dt.datetime(2025, 1, 1, 0, 0, 7, 250000, tzinfo=UTC)
    bare = {"metadata": {"creationTimestamp": "2025-01-01T00:00:04Z"}}
    assert event_first_time(bare) == event_last_time(bare) == dt.datetime(2025, 1, 1, 0, 0, 4, tzinfo=UTC)


@pytest.mark.parametrize("text,seconds", [("5.002s", 5.002), ("100ms", 0.1), ("1m2.5s", 62.5),
                                          ("1h0m3s", 3603.0), ("250µs", 0.00025), ("bad", None)])
def test_go_duration(text, seconds):
    assert parse_go_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_a_pull_queued_behind_another_counts_its_wait():
    """Two pods on a node pulling the same image: the second waits for the first, and the
    kubelet's message says so ("in 100ms (14.4s including waiting)"). That wait is an
    image pull wait, not a cached image."""
    from jupyterhub_gpu_reclaim.spawner.timings import pull_seconds

    queued = {"message": 'Successfully pulled image "x:1" in 100ms (14.4s including waiting). '
                         'Image size: 5000000000 bytes.'}
    cached = {"message": 'Successfully pulled image "x:latest" in 100ms (100ms including waiting). '
                         'Image size: 1100000000 bytes.'}
    older = {"message": 'Successfully pulled image "x:1" in 20.5s'}  # kubelets before 1.28
    assert pull_seconds(queued) == 14.4 and pull_seconds(cached) == 0.1 and pull_seconds(older) == 20.5
