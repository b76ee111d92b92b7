"""Faults: the real signal classes (HubSignal, PrometheusSignal, KernelSignal) and the real
HubStopper against real HTTP fakes on 127.0.0.1 (tests/support/fakes.py), wired into a
Reclaimer with a fake pod source, a real Store and a controllable clock.

For each fault: nothing is reclaimed on missing data, the fault is logged and counted, and
the service recovers once the fault clears. Last, the real CLI as a subprocess."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import signal
import socket
import sys

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim.launch import free_port
from ..support.clock import START, at
from ..support.cycles import P
from ..support.fakes import FakeHubAPI
from ..support.fault_world import TOKEN, World

UTC = dt.timezone.utc


@pytest.fixture
async def world(tmp_path):
    w = await World(tmp_path).start()
    yield w
    await w.close()


# ---------------------------------------------------------------------------- cycle skipped


@pytest.mark.parametrize("fault", ["hub-500", "hub-timeout"])
async def test_hub_failure_skips_the_cycle_then_recovers(world, caplog, fault):
    caplog.set_level(logging.INFO)
    w = world
    gpu = w.add("alice")  # never used: would be warned at 30, reclaimed at 60
    cpu = w.add("bob", gpus=0, last_activity=START)  # idle-culler: due at 60

    def each(t):
        down = at(15) <= t <= at(40)
        w.hub.mode = ("500" if fault == "hub-500" else "hang") if down else "ok"

    await w.run_until(at(40), each)
    skipped = [r for r in w.reports if r.skipped]
    source = "hub"
    assert [r.t for r in skipped] == [at(m) for m in range(15, 45, 5)]
    assert all(r.skipped == source and r.decisions == {} and r.stops == [] for r in skipped)
    assert w.hub.deletes == [] and w.warning_rows() == 0
    assert w.metric(P + "cycles_total", result=f"skipped-{source}") == 6
    assert w.metric(P + "signal_errors_total", source=source) == 6
    assert f"signal {source} failed" in caplog.text
    assert TOKEN not in caplog.text

    await w.run_until(at(110), each)
    # recovered: bob is culled as soon as a cycle runs (he was due during the fault);
    # alice's data on both sides of the 35-minute hole (GPU idle, no kernel activity)
    # proves her idle across it: her warning, due at 30, goes out at the first cycle back
    assert w.stopped(cpu) == [at(60)]
    assert w.warned(gpu) == [at(45)]
    assert w.stopped(gpu) == [at(60)]
    assert sorted(w.hub.deletes) == ["/hub/api/users/alice/server", "/hub/api/users/bob/server"]
    assert {r.outcome for r in w.store.reclaims()} == {"stopped"}
    assert w.metric(P + "cycles_total", result="ok") == len(w.reports) - 6
    assert w.hub.auth == {f"token {TOKEN}"}


async def test_pods_failure_culls_the_servers_without_gpus_it_saw_and_holds_the_others(world, caplog):
    """The pod list cannot be read from 15 to 70 min: the servers the last list showed
    running without GPUs are still culled by idle-culler's rule; GPU sessions, and servers
    the last list did not show (started since), are held with the reason, never reclaimed;
    every such cycle is degraded, not a success. Back, the GPU session is decided again."""
    caplog.set_level(logging.INFO)
    w = world
    down = "the pod watch has been down for over 300 s: watch: HTTP 410 Gone"
    gpu = w.add("alice")  # never used: would be warned at 30, reclaimed at 60
    cpu = w.add("bob", gpus=0, last_activity=START)  # idle-culler: due at 60
    busy = w.add("carol", gpus=0, last_activity=START)  # active all along: kept
    await w.run_until(at(10))
    late = w.add("dan", gpus=0, last_activity=START)  # started at 0, first listed at 15: never seen
    del w.pods.pods[late]  # (its pod is not in the last list read)

    def each(t):
        w.pods.fail = down if at(15) <= t <= at(70) else None
        w.hub.users["carol"]["servers"][""]["last_activity"] = t.isoformat()

    await w.run_until(at(70), each)
    degraded = [r for r in w.reports if r.degraded]
    assert [r.t for r in degraded] == [at(m) for m in range(15, 75, 5)]
    assert all(r.skipped is None and r.degraded == "pods" for r in degraded)
    assert w.stopped(cpu) == [at(60)]  # culled as it would have been
    d = next(r.decisions[cpu] for r in w.reports if r.t == at(60))
    assert (d.action, d.rule) == ("reclaim", "idle-culler-timeout") and d.shown()["pods_as_of"] == "2026-11-02T08:10:00Z"
    assert w.decisions(busy, since=at(15), until=at(70)) == {("keep", "idle-culler")}
    assert w.decisions(gpu, since=at(15), until=at(70)) == {("hold", "pods-unavailable")}
    assert w.decisions(late, since=at(15), until=at(70)) == {("hold", "pods-unavailable")}
    held = next(r.decisions[gpu] for r in w.reports if r.t == at(60))
    assert held.shown() == {"problem": down, "pods_as_of": "2026-11-02T08:10:00Z"}
    assert "the pod list cannot be read" in held.reason and "its GPUs cannot be seen" in held.reason
    assert w.warned(gpu) == [] and w.stopped(gpu) == [] and w.stopped(late) == []
    assert w.hub.deletes == ["/hub/api/users/bob/server"]
    assert w.metric(P + "cycles_total", result="degraded-pods") == 12
    assert w.metric(P + "signal_errors_total", source="pods") == 12
    assert w.metric(P + "holds", reason="pods-unavailable") == 2
    assert "pods unavailable (decided with the last list read)" in caplog.text

    await w.run_until(at(90), each)  # the list back: alice, never used, is warned at once
    assert w.warned(gpu) == [at(75)] and w.stopped(gpu) == [at(90)]
    assert w.metric(P + "cycles_total", result="ok") == len(w.reports) - 12


# ---------------------------------------------------------------------------- GPU data


@pytest.mark.parametrize("fault", ["refused", "http-503", "status-error"])
async def test_prometheus_failure_holds_gpu_sessions_then_recovers(world, caplog, fault):
    caplog.set_level(logging.INFO)
    w = world
    gpu = w.add("alice")
    cpu = w.add("bob", gpus=0, last_activity=at(-50))  # due at 10
    live_url = w.prom_signal.url
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{s.getsockname()[1]}"

    def each(t):
        down = t <= at(30)
        if fault == "refused":
            w.prom_signal.url = dead_url if down else live_url
        else:
            w.prom.mode = fault if down else "ok"

    await w.run_until(at(55), each)
    # GPU data missing: held (never warned, never reclaimed); the CPU server is still culled
    assert w.decisions(gpu, until=at(30)) == {("hold", "gpu-data-missing")}
    assert w.warned(gpu) == [] or w.warned(gpu)[0] > at(30)
    assert w.stopped(cpu) == [at(10)]
    assert w.metric(P + "signal_errors_total", source="prometheus") == 7
    assert w.metric(P + "cycles_total", result="ok") == len(w.reports)  # not skipped
    assert "signal prometheus failed" in caplog.text

    await w.run_until(at(95), each)
    # recovered: the idle episode starts at the last sample without GPU data (30 min)
    assert w.warned(gpu) == [at(60)]
    assert w.stopped(gpu) == [at(90)]
    assert w.metric(P + "holds", reason="gpu-data-missing") is None


async def test_hanging_kernel_endpoint_holds_gpu_idle_session_then_recovers(world, caplog):
    caplog.set_level(logging.INFO)
    w = world
    gpu = w.add("alice")

    def each(t):
        w.servers.mode = "hang" if at(50) <= t <= at(70) else "ok"

    await w.run_until(at(70), each)
    assert w.warned(gpu) == [at(30)]  # warnings still go out
    assert w.decisions(gpu, since=at(60)) == {("hold", "kernel-data-missing")}
    assert w.stopped(gpu) == [] and w.hub.deletes == []
    assert w.metric(P + "signal_errors_total", source="kernels") == 5
    assert w.metric(P + "holds", reason="kernel-data-missing") == 1
    assert "kernels of alice:" in caplog.text
    assert all("kernels" in r.problems.get(gpu, {}) for r in w.reports[-5:])

    await w.run_until(at(80), each)
    assert w.stopped(gpu) == [at(75)]  # due, and the kernels answer again
    assert w.hub.deletes == ["/hub/api/users/alice/server"]
    assert w.warning_rows() == 1


# ---------------------------------------------------------------------------- stops


async def test_killed_mid_stop_and_restarted_finishes_the_stop(world, caplog):
    caplog.set_level(logging.INFO)
    w = world
    gpu = w.add("alice")
    await w.run_until(at(55))
    assert w.warned(gpu) == [at(30)]

    # the stop at 60 min: the hub accepts it (202) and keeps the server pending
    w.hub.delete_mode = "202"
    w.stopper.stop_timeout = 30.0
    report = await w.reclaimer.run_cycle()
    assert report.stops == [gpu]
    for _ in range(200):
        if w.hub.deletes:
            break
        await asyncio.sleep(0.01)
    assert w.hub.deletes == ["/hub/api/users/alice/server"]
    await w.reclaimer.cancel()  # the service is killed mid-stop
    (record,) = w.store.unfinished_reclaims()
    assert record.session == gpu and record.outcome is None
    w.now[0] = at(65)

    # the new process: the hub has finished the stop meanwhile
    w.hub.finish_stop("alice")
    w.hub.delete_mode = "204"
    w.new_reclaimer()
    w.reports.clear()
    await w.run_until(at(75))
    assert [r.warned for r in w.reports] == [[], [], []]
    assert [r.stops for r in w.reports] == [[], [], []]  # no new reclaim: the old one is finished
    (record,) = w.store.reclaims()
    assert record.outcome == "stopped"
    assert w.store.unfinished_reclaims() == [] and w.store.stuck_reclaims() == []
    assert w.warning_rows() == 1
    assert w.hub.deletes == ["/hub/api/users/alice/server"] * 2
    assert w.metric(P + "reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    assert "retrying the unfinished stop of alice/" in caplog.text


async def test_stop_that_never_completes_is_stuck_and_retried(world, caplog):
    caplog.set_level(logging.INFO)
    w = world
    gpu = w.add("alice")
    w.hub.delete_mode = "202"  # accepted, then pending forever
    await w.run_until(at(60))
    assert w.stopped(gpu) == [at(60)]
    (record,) = w.store.reclaims()
    assert record.outcome == "stuck" and "still listed" in record.detail
    assert [r.id for r in w.store.stuck_reclaims()] == [record.id]
    assert w.metric(P + "stuck_stops") == 1
    assert w.metric(P + "reclaims_total", rule="gpu-never-used", outcome="stuck") == 1
    assert "stop alice: stuck" in caplog.text

    await w.cycle()  # retried, still stuck
    assert len(w.hub.deletes) == 2
    assert w.store.stuck_reclaims()[0].id == record.id
    assert w.metric(P + "stuck_stops") == 1

    w.hub.finish_stop("alice")  # the hub finally stops it
    await w.run_until(at(80))
    assert len(w.hub.deletes) == 3  # one retry more, then nothing
    (record,) = w.store.reclaims()
    assert record.outcome == "stopped"
    assert w.store.stuck_reclaims() == []
    assert w.metric(P + "stuck_stops") == 0
    assert w.metric(P + "reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    assert w.warning_rows() == 1
    assert all(r.stops == [] for r in w.reports if r.t > at(60))


# ---------------------------------------------------------------------------- the CLI


async def test_cli_with_failing_pod_signal_reclaims_nothing_and_stops_on_sigterm(tmp_path):
    hub = await FakeHubAPI().start()
    try:
        long_ago = dt.datetime.now(UTC) - dt.timedelta(days=2)
        hub.add_server("bob", started=long_ago, last_activity=long_ago)  # would be culled
        hub.add_server("alice", started=long_ago, last_activity=long_ago)
        port = free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTERHUB_", "KUBERNETES_"))}
        env.update(JUPYTERHUB_API_TOKEN=TOKEN, KUBECONFIG=str(tmp_path / "no-such-kubeconfig"),
                   POD_NAMESPACE="jhub", PYTHONUNBUFFERED="1")
        out = open(tmp_path / "out.log", "wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jupyterhub_gpu_reclaim", f"--url={hub.api}", "--cull-every=1",
            "--timeout=60", f"--store-url=sqlite:///{tmp_path}/store.sqlite",
            f"--bind-url=http://127.0.0.1:{port}", "--stop-timeout=2",
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
        try:
            errors = 0.0
            async with aiohttp.ClientSession() as client:
                for _ in range(150):
                    await asyncio.sleep(0.1)
                    if proc.returncode is not None:
                        break
                    try:
                        async with client.get(f"http://127.0.0.1:{port}/metrics") as r:
                            text = await r.text()
                    except aiohttp.ClientError:
                        continue
                    errors = next((s.value for f in text_string_to_metric_families(text)
                                   for s in f.samples if s.name == P + "signal_errors_total"
                                   and s.labels == {"source": "pods"}), 0.0)
                    if errors >= 2:
                        break
            assert proc.returncode is None, (tmp_path / "out.log").read_text()
            assert errors >= 2, (tmp_path / "out.log").read_text()
            assert ("GET", "/hub/api/users") in hub.requests  # it did read the hub
            assert hub.deletes == []
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            out.close()
        log = (tmp_path / "out.log").read_text()
        assert rc == 0, log
        assert "signal pods failed" in log
        assert "stopping" in log
        assert "Traceback" not in log
        assert TOKEN not in log
        assert hub.auth == {f"token {TOKEN}"}
        assert hub.deletes == []
    finally:
        await hub.close()
