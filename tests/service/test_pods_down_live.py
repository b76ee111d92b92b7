"""The cluster's Kubernetes API stopped mid-run (the worker's kube-apiserver frozen: requests
hang, as to an API server that is unreachable; the node agent and the pods' processes run on): the service, a managed
service of a real hub over KubeSpawner, goes on culling the idle server without a GPU that
its last pod list showed, and holds the GPU session with the reason; once the API is back,
it decides the GPU session again. The rules themselves: tests/faults/test_faults.py."""

from __future__ import annotations

import datetime as dt
import os
import signal

import pytest

from jupyterhub_gpu_reclaim.store import Store

from ..support.hubapi import HubAPI
from ..support.service_hub import latest_rule, metric, metrics, start_service_hub, until
from ..support.store_reads import decisions_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# bob's idle clock starts as the API stops (his activity posted then); he is due once the
# service has noticed: the watch's request times out (at most 15 s after its last answer,
# so the list is over STALE s old by then). GPU_TIMEOUT s of wait for the GPU metrics, not
# 10 s, keeps the cycles short meanwhile.
TIMEOUT, STALE, GPU_TIMEOUT = 25, 5, 2


def decisions(hub, session: str) -> list:
    with Store.open(hub.info["store"]) as store:
        return [d for _, d in decisions_of(store, session)]


@pytest.mark.jupyterhub(6, reason="what the service does with the API down does not depend on the hub's "
                                   "major; once is enough for the suite's time")
async def test_with_the_api_stopped_idle_cpu_servers_are_culled_and_gpu_sessions_held(sim, control_plane, tmp_path):
    apiserver = next(c.process.pid for c in control_plane.components if c.name == "kube-apiserver")
    hub = start_service_hub(tmp_path / "hub", sim, timeout=TIMEOUT, stale_after=STALE, gpu_request_timeout=GPU_TIMEOUT,
                            never_used_warn_after=900, never_used_reclaim_after=1800)
    frozen = False
    try:
        async with HubAPI.of(hub) as api:
            await api.start("bob", "cpu")
            await api.start("alice", "gpu-1")
            await api.wait_ready("bob")
            await api.wait_ready("alice")
            await until(lambda: latest_rule(hub, "alice/") and latest_rule(hub, "bob/"), 60, "both seen")
            assert latest_rule(hub, "bob/") == ("keep", "idle-culler")
            now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
            await api.request("POST", "/users/bob/activity", {"servers": {"": {"last_activity": now}}})
            os.kill(apiserver, signal.SIGSTOP)
            frozen = True
            await until(lambda: latest_rule(hub, "alice/") == ("hold", "pods-unavailable"), 60, "alice held")
            await until(lambda: latest_rule(hub, "bob/") == ("reclaim", "idle-culler-timeout"), TIMEOUT + 60,
                        "bob culled")
            bob = decisions(hub, "bob/")[-1]
            assert bob.evidence["pods_as_of"]  # decided with the last pod list read
            alice = decisions(hub, "alice/")[-1]
            assert "the pod list cannot be read" in alice.reason and alice.evidence["problem"]
            values = metrics(hub)
            assert metric(values, "jupyterhub_gpu_reclaim_cycles_total", result="degraded-pods") >= 1
            assert metric(values, "jupyterhub_gpu_reclaim_reclaims_total", rule="gpu-never-used",
                          outcome="stopped") == 0
            os.kill(apiserver, signal.SIGCONT)
            frozen = False
            await until(lambda: latest_rule(hub, "alice/") != ("hold", "pods-unavailable"), 120,
                        "alice decided again with the API back")
            assert latest_rule(hub, "alice/")[1] in ("gpu-never-used", "gpu-data-missing")
    finally:
        if frozen:
            os.kill(apiserver, signal.SIGCONT)
        hub.stop(grace=60)
