"""The GPU queue timeout on a virtual clock: a spawn whose pod waits for a GPU is withdrawn
once it has waited gpu_queue_timeout, counted from when the scheduler first said it waits,
never before, and never while its pod is not waiting. (The live test,
tests/spawner/test_spawner_live.py, checks the wiring with a short timeout: the spawn
page's messages, the failed spawn, the pod gone.)"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from jupyterhub_gpu_reclaim.spawner import core
from jupyterhub_gpu_reclaim.spawner.core import GpuQueueTimeout, GPUReclaimSpawner
from jupyterhub_gpu_reclaim.timestamps import format_time

from ..support.clock import at

TIMEOUT = 600.0
COUNTER = "jupyterhub_gpu_reclaim_gpu_queue_timeouts_total"


class Clock:
    """utcnow() and asyncio.sleep() for the watch: each sleep moves the time on; past
    `end` it stops the watch (OverflowError) instead."""

    def __init__(self, now: dt.datetime, end: dt.datetime) -> None:
        self.now, self.end = now, end

    async def sleep(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)
        if self.now > self.end:
            raise OverflowError("the watch went on past the test's end")


def pod(waiting_since: dt.datetime | None) -> dict:
    """A 1-GPU pod, Pending: Unschedulable for lack of a GPU since `waiting_since`, or
    bound to a node (None)."""
    if waiting_since is None:
        return {"metadata": {"creationTimestamp": format_time(at())}, "spec": {"nodeName": "gpu-1"},
                "status": {"phase": "Pending"}}
    return {"metadata": {"creationTimestamp": format_time(waiting_since)},
            "spec": {"containers": [{"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                "lastTransitionTime": format_time(waiting_since)}]}}


async def watch(monkeypatch, the_pod: dict, requested: dt.datetime, end: dt.datetime) -> Clock:
    """Runs GPUReclaimSpawner's queue watch over `the_pod` from `requested` until it raises."""
    clock = Clock(requested, end)
    monkeypatch.setattr(core, "utcnow", lambda: clock.now)
    monkeypatch.setattr(core, "asyncio", SimpleNamespace(sleep=clock.sleep))
    spawner = SimpleNamespace(gpu_queue_timeout=TIMEOUT, _requested=requested, _log_name="ivan",
                              _pod=lambda: the_pod, log=SimpleNamespace(warning=lambda *a: None))
    await GPUReclaimSpawner._watch_gpu_queue(spawner)
    return clock


async def test_withdrawn_once_it_has_waited_the_timeout(monkeypatch):
    before = REGISTRY.get_sample_value(COUNTER) or 0
    with pytest.raises(GpuQueueTimeout) as err:
        await watch(monkeypatch, pod(waiting_since=at()), requested=at(), end=at(hours=1))
    assert core.utcnow() == at(seconds=TIMEOUT)  # the first check at 10 min, not before
    assert err.value.jupyterhub_message == ("No GPU became free within 10 min; your request for 1 GPU "
                                            "was withdrawn. Try again later or choose a CPU profile.")
    assert REGISTRY.get_sample_value(COUNTER) == before + 1


async def test_the_wait_counts_from_when_the_scheduler_said_so(monkeypatch):
    # the spawn was requested 8 min after the pod began waiting (the hub restarted meanwhile)
    with pytest.raises(GpuQueueTimeout):
        await watch(monkeypatch, pod(waiting_since=at()), requested=at(8), end=at(hours=1))
    assert core.utcnow() == at(seconds=TIMEOUT)


async def test_a_pod_not_waiting_for_a_gpu_is_never_withdrawn(monkeypatch):
    with pytest.raises(OverflowError):  # the clock's end, 3 h on: the watch never raised
        await watch(monkeypatch, pod(waiting_since=None), requested=at(), end=at(hours=3))
