"""Malformed answers, 200 OK, from the Kubernetes API: pods in the list and in the watch,
lines of the watch that are no event, and pod lists that cannot be read. Wrong types,
absurd dates, huge numbers, deep nesting, text that is not JSON, bodies over the size limit.

The real PodSignal reads a fake Kubernetes API (tests/support/fakes.py), wired into a
Reclaimer as in test_faults.py (the `make` fixture: tests/faults/conftest.py). In every
test, bystanders are warned and reclaimed on schedule, each concerned session is held with
the reason, and the cycles' metrics tell the truth (tests/support/hostile_world.py)."""

from __future__ import annotations

import json
import logging

import pytest

from jupyterhub_gpu_reclaim.signals.http_source import MAX_BODY

from ..support.clock import START, at
from ..support.cycles import P
from ..support.hostile_world import ABSURD, DEEP, HUGE_INT, assert_all_ok


# ---------------------------------------------------------------------------- the Kubernetes API


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


POD_CHANGES = {  # victim: (change to its pod: path → value, the hold's rule, evidence)
    "absurd-created": ({"metadata.creationTimestamp": ABSURD}, "pod-data-invalid", "out of range once in UTC"),
    "containers": ({"spec.containers": "notebook"}, "pod-data-invalid", "containers: str"),
    "gpus-1e400": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": "1e400"}}, "pod-data-invalid",
                   "is not a GPU count"),
    "gpus-huge-int": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": int(HUGE_INT)}},
                      "pod-data-invalid", "is not a GPU count"),
    "gpus-negative": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": -1}}, "pod-data-invalid",
                      "is not a GPU count"),
    "port": ({"spec.containers.0.ports.0.containerPort": "8888"}, "pod-data-invalid", "containerPort: str"),
    "pod-ip": ({"status.podIP": "evil.example.com/steal?"}, "pod-data-invalid", "does not appear to be an IP"),
    "status": ({"status": ["Running"]}, "pod-data-invalid", "status: list"),
    "conditions": ({"status.conditions": ["Ready"]}, "pod-data-invalid", "conditions: an item is not an object"),
    "ready": ({"status.containerStatuses.0.ready": "yes"}, "pod-data-invalid", "ready: str"),
    "deep": ({"spec.containers.0.resources": nested(500)}, "pod-data-invalid", "resources: list"),
    "no-name": ({"metadata.name": None}, "pod-missing", None),
    "user-number": ({"metadata.annotations.hub.jupyter.org/username": 5}, "pod-missing", None),
}


def change(pod: dict, path: str, value) -> None:
    keys = path.split(".")
    if keys[:2] == ["metadata", "annotations"]:  # the annotation's key holds dots
        keys = keys[:2] + [".".join(keys[2:])]
    target = pod
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(keys[-1]) if isinstance(target, list) else keys[-1]] = value


@pytest.mark.parametrize("via", ["list", "watch"])
async def test_malformed_pods_hold_only_their_session(make, caplog, via):
    caplog.set_level(logging.INFO)
    w = await make(kube=True)
    victims = {}
    for name, (changes, rule, problem) in POD_CHANGES.items():
        sid = w.add(f"k8s-{name}")
        victims[sid] = (f"jupyter-k8s-{name}", changes, rule, problem)
    held_since = START

    async def spoil():
        for pod_name, changes, _, _ in victims.values():
            pod = json.loads(json.dumps(w.kube.pods[pod_name]))
            for path, value in changes.items():
                change(pod, path, value)
            if via == "list":
                w.kube.pods[pod_name] = pod
            else:
                await w.kube.put(pod_name, pod)

    if via == "list":
        await spoil()
    else:
        await w.run_until(at(5))
        assert all(w.reports[-1].decisions[sid].action == "keep" for sid in victims)
        await spoil()
        held_since = at(10)
        untold = ("jupyter-k8s-no-name", "jupyter-k8s-user-number")  # the watch re-lists: gone
        await w.until(lambda: all(p.invalid for p in w.pods.pods.values() if p.name.startswith("jupyter-k8s-"))
                      and not set(untold) & set(w.pods.pods), "the watch delivered the spoilt pods")
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    for sid, (_, _, rule, problem) in victims.items():
        if problem is None:  # a pod that cannot be told apart: the server's pod is missing
            assert {(r.decisions[sid].action, r.decisions[sid].rule) for r in w.reports
                    if r.t >= held_since} == {("hold", "pod-missing")}
            assert w.stopped(sid) == []
        else:
            w.assert_held(sid, rule, problem, since=held_since)
    assert_all_ok(w)
    assert w.metric(P + "holds", reason="pod-data-invalid") == 11
    assert "ignoring a pod that cannot be told apart" in caplog.text


async def test_malformed_watch_events_relist_and_hold_nobody_else(make, caplog):
    """Lines of the watch that are no event: ignored, or the watch drops and the pods are
    listed again; either way the view stays current and nobody else is held."""
    caplog.set_level(logging.INFO)
    w = await make(kube=True)
    await w.run_until(at(5))
    lines = [b"<html>", DEEP, b'{"type": "MODIFIED", "object": "a pod"}', b'{"type": 5, "object": {}}',
             b"{" + b" " * (5 * 1024 * 1024) + b"}"]  # over kubernetes-asyncio's 4 MiB line
    for i, line in enumerate(lines):
        await w.kube.send_line(line)
        await w.kube.put(f"marker-{i}", {**w.pod(f"marker-{i}"), "metadata": {"name": f"marker-{i}"}})
        await w.until(lambda i=i: f"marker-{i}" in w.pods.pods, f"the view current after {line[:20]!r}")
        await w.cycle()
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    assert_all_ok(w)
    assert w.pods.relists == 1 + 4  # all but the line that is not JSON (kubernetes-asyncio skips it)
    dropped = [r.getMessage() for r in caplog.records if "pod watch dropped" in r.getMessage()]
    assert any("LineTooLong" in m for m in dropped), dropped


@pytest.mark.parametrize("body,problem", [
    (b"<html>", "JSONDecodeError"),
    (DEEP, "RecursionError"),
    (b'{"kind": "PodList", "items": []}' + b" " * MAX_BODY["pods"], "larger than"),
    (b'{"kind": "PodList", "items": {"a": 1}}', "items: dict"),
], ids=["not-json", "deep", "huge-body", "items-not-a-list"])
async def test_unusable_pod_list_holds_whom_it_cannot_see_and_is_not_a_success(make, body, problem):
    w = await make(kube=True)
    w.kube.raw_list = body
    await w.run_until(at(5))
    # no pod list read yet: nobody can be told from a GPU session
    assert [r.degraded for r in w.reports] == ["pods", "pods"]
    assert problem in w.reports[-1].errors["pods"]
    assert {(d.action, d.rule) for r in w.reports for d in r.decisions.values()} == {("hold", "pods-unavailable")}
    w.kube.raw_list = None
    await w.run_until(at(30))
    assert [r.degraded for r in w.reports[2:]] == [None] * 5
    assert w.warned(w.bob) == [at(10)] and w.stopped(w.bob) == [at(20)]
    w.assert_cycle_metrics_truthful()
