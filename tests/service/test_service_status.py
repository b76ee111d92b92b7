"""What the reclaim cycle (service.Reclaimer, with the in-process fakes of
tests/support/harness.py) publishes: the /metrics text, and the status the pages and the API
read, as the cycle saw and decided it."""

from __future__ import annotations

import pytest

from jupyterhub_gpu_reclaim.signals.hub import HubServer
from jupyterhub_gpu_reclaim.signals.pod_facts import GpuWait
from jupyterhub_gpu_reclaim.signals.pods import PodInfo

from ..support.clock import START, at
from ..support.cycles import NS, P


async def test_metrics_text(harness):
    h = harness()
    h.add("alice")  # never used: warned at 30, reclaimed at 60
    h.add("carol", util=(90.0,))
    h.add("dan", gpus=None)  # pod missing
    h.add("erin", gpus=2, util=(0.0, None))  # GPU data missing
    h.add("bob", gpus=0, last_activity=START)
    h.pods.pending_gpus = 3

    def each(t):
        h.hub.servers["bob/"] = HubServer(user="bob", started=START, ready=True, last_activity=t, url="/user/bob/")

    await h.run_until(at(60), each)

    m = h.metric
    assert m(P + "sessions", gpu="true", action="reclaim", rule="gpu-never-used") == 1
    assert m(P + "sessions", gpu="true", action="keep", rule="gpu-active") == 1
    assert m(P + "sessions", gpu="true", action="hold", rule="gpu-data-missing") == 1
    assert m(P + "sessions", gpu="false", action="hold", rule="pod-missing") == 1
    assert m(P + "sessions", gpu="false", action="keep", rule="idle-culler") == 1
    assert m(P + "sessions", gpu="true", action="keep", rule="gpu-never-used") is None  # cleared each cycle
    assert m(P + "holds", reason="pod-missing") == 1
    assert m(P + "holds", reason="gpu-data-missing") == 1
    assert m(P + "warnings_total", rule="gpu-never-used") == 1
    assert m(P + "reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    assert m(P + "reclaimed_gpus_total") == 1
    assert m(P + "idle_gpus") == 1
    assert m(P + "idle_gpu_hours") == pytest.approx(1.0)
    assert m(P + "pending_gpus") == 3
    assert m(P + "stuck_stops") == 0
    assert m(P + "cycles_total", result="ok") == 13
    assert m(P + "cycle_duration_seconds_count") == 13
    assert m(P + "cycle_duration_seconds_bucket", le="+Inf") == 13
    assert m(P + "dry_run") == 0
    assert m(P + "signal_errors_total", source="hub") is None

    # a failing signal skips the cycle and is counted
    h.hub.fail = "HTTP 500"
    report = await h.cycle()
    assert report.skipped == "hub" and report.decisions == {}
    assert m(P + "cycles_total", result="skipped-hub") == 1
    assert m(P + "signal_errors_total", source="hub") == 1
    # a failing pod list: decided with the last one read, not a success
    h.hub.fail, h.pods.fail = None, "the pod watch has been down for over 300 s: watch: HTTP 410 Gone"
    report = await h.cycle()
    assert report.skipped is None and report.degraded == "pods"
    assert m(P + "cycles_total", result="degraded-pods") == 1
    assert m(P + "signal_errors_total", source="pods") == 1
    assert m(P + "sessions", gpu="true", action="hold", rule="pods-unavailable") == 2  # carol, erin
    assert m(P + "sessions", gpu="false", action="hold", rule="pods-unavailable") == 1  # dan: never seen
    assert m(P + "sessions", gpu="false", action="keep", rule="idle-culler") == 1  # bob
    assert h.stopper.calls == [("alice", "")]


async def test_the_published_status_is_what_the_cycle_saw_and_decided(harness):
    """What the pages and the API read (status.CycleStatus): each session's decision, warning
    and utilization, the GPU queue; a skipped cycle keeps the sessions and says why."""
    h = harness()
    sid = h.add("alice", util=(0.0,))
    h.add("bob", gpus=0, last_activity=START)
    h.kernels.states["/user/alice/"] = ["idle", "idle"]
    h.pods.pods["carol/"] = PodInfo(namespace=NS, name="jupyter-carol", user="carol", server="", gpus=2,
                                    node=None, phase="Pending", ready=False, pod_ip=None, port=8888,
                                    created=at(10), unschedulable="0/3 nodes: Insufficient nvidia.com/gpu",
                                    gpu_wait=GpuWait({"gpu": 2}, since=at(10)))
    await h.run_until(at(20))
    status = h.reclaimer.status
    assert status.t == at(20) and status.skipped is None
    alice = status.sessions[sid]
    assert (alice.user, alice.gpus, alice.node, alice.url) == ("alice", 1, "gpu-node-1", "/user/alice/")
    # two kernels open, no cell run, the GPU unused: the never-used clock runs (warning due at 30)
    assert (alice.action, alice.rule) == ("keep", "gpu-never-used") and alice.util_now == [0.0]
    assert alice.util_mean == [0.0] and alice.util_max == [0.0]
    # the sparkline: the last 2 h in 2-min slices up to the latest sample; a sample every 5 min
    assert len(alice.spark) == 60 and alice.spark[-1] == 0.0 and alice.idle_threshold == h.policy.gpu_idle_threshold
    assert [i for i, v in enumerate(alice.spark) if v is not None] == [49, 52, 54, 57, 59]
    assert (alice.kernels.busy, alice.kernels.idle) == (0, 2) and not alice.stopping
    assert status.sessions["bob/"].gpus == 0 and status.sessions["bob/"].kernels is None
    [waiting] = status.queue
    assert (waiting.session, waiting.gpus, waiting.since, waiting.waited_s) == ("carol/", 2, at(10), 600)

    h.kernels.states["/user/alice/"] = ["idle"]
    await h.run_until(at(30))  # GPU unused since the start: warned at 30
    alice = h.reclaimer.status.sessions[sid]
    assert (alice.action, alice.warned_at, alice.reclaim_at) == ("warn", None, at(60))  # published first
    # dave has waited longer than carol for one GPU: alice's, due at 60 (carol needs two: no guess)
    h.pods.pods["dave/"] = PodInfo(namespace=NS, name="jupyter-dave", user="dave", server="", gpus=1,
                                   node=None, phase="Pending", ready=False, pod_ip=None, port=8888,
                                   created=at(5), unschedulable="0/3 nodes: Insufficient nvidia.com/gpu",
                                   gpu_wait=GpuWait({"gpu": 1}, since=at(5)))
    await h.run_until(at(35))
    alice = h.reclaimer.status.sessions[sid]
    assert (alice.action, alice.warned_at, alice.reclaim_at) == ("keep", at(30), at(60))
    assert [(q.session, q.expected_free_at) for q in h.reclaimer.status.queue] == [("dave/", at(60)), ("carol/", None)]

    h.hub.fail = "hub down"
    await h.run_until(at(40))
    assert h.reclaimer.status.skipped == "hub" and h.reclaimer.status.t == at(35)
    assert sid in h.reclaimer.status.sessions


async def test_a_completed_stop_leaves_the_published_status_at_once(harness):
    """The pages read the latest cycle's status: once the stop the cycle began completes,
    the session is gone from it, not shown "will be reclaimed at …" until the next cycle."""
    h = harness()
    sid = h.add("alice")
    h.add("bob", gpus=0, last_activity=at(55))
    await h.run_until(at(55))
    assert h.reclaimer.status.sessions[sid].reclaim_at == at(60)
    await h.run_until(at(60))  # the cycle at 60 begins the stop; it completes (drained) before the next
    assert h.stopped(sid) == [at(60)] and h.reclaimer.status.t == at(60)
    assert sid not in h.reclaimer.status.sessions and "bob/" in h.reclaimer.status.sessions
