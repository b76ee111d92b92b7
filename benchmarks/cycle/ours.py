"""Our reclaim cycle in benchmarks/service_cycle.py: `service.Reclaimer` with the real
signals against the fakes (or the pods view pre-filled)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks.cycle.measure import diff, fake_counters, summary
from benchmarks.cycle.scene import CULL_TIMEOUT_S, NAMESPACE, TOKEN, Scene, iso, pod_json
from benchmarks.support.process import proc_status


class FakePods:
    """The pods signal's in-memory view (what PodSignal.snapshot reads), pre-filled."""

    def __init__(self, server_port: int, scene: Scene) -> None:
        from jupyterhub_gpu_reclaim.signals.pods import PodInfo, pod_info

        created = iso(dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=3))
        self.pods: dict[str, PodInfo] = {}
        for i in range(scene.servers):
            info = pod_info(pod_json(i, scene.gpu(i), server_port, created))
            self.pods[info.name] = info

    async def start(self) -> None:
        return None

    def snapshot(self, max_age: float):
        from jupyterhub_gpu_reclaim.signals.pods import PodSnapshot

        pods = dict(self.pods)  # as PodSignal.pods_now()
        return PodSnapshot(by_session={p.session_id: p for p in pods.values() if p.user},
                           pending_gpus=sum(p.gpus for p in pods.values() if p.waits_for_gpu))


def _profiler(profile: str | None) -> Any:
    """A cProfile profiler of CPU time (the machine's load moves wall time), enabled; None
    without --profile."""
    if not profile:
        return None
    import cProfile

    prof = cProfile.Profile(time.process_time)
    prof.enable()
    return prof


def decisions(report: Any) -> dict[str, list[str]]:
    """Each session's action and rule: what --decisions compares across versions."""
    return {sid: [d.action, d.rule] for sid, d in report.decisions.items()}


async def run_ours(ports: dict[str, int], cycles: int, profile: str | None, pods_mode: str,
                   scene: Scene) -> dict[str, Any]:
    import tracemalloc

    from jupyterhub_gpu_reclaim.service.hub_stopper import HubStopper
    from jupyterhub_gpu_reclaim.service.notify import Dispatcher, LogNotifier
    from jupyterhub_gpu_reclaim.service.cycle import Reclaimer
    from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
    from jupyterhub_gpu_reclaim.policy.rules import PolicyRules
    from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
    from jupyterhub_gpu_reclaim.signals.hub import HubSignal
    from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
    from jupyterhub_gpu_reclaim.signals.probe_token_client import ProbeTokens
    from jupyterhub_gpu_reclaim.signals.prometheus import PrometheusSignal
    from jupyterhub_gpu_reclaim.store import Store

    hub_base = f"http://127.0.0.1:{ports['hub']}"
    api = f"{hub_base}/hub/api"
    tracemalloc.start()
    pods = FakePods(ports["servers"], scene)
    pods_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()

    del pods
    tmp = tempfile.mkdtemp(prefix="bench-cycle-")
    if pods_mode == "watch":
        from jupyterhub_gpu_reclaim.signals.pods import PodSignal

        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "bench",
                       "clusters": [{"name": "bench", "cluster": {
                           "server": f"http://127.0.0.1:{ports['kubernetes']}"}}],
                       "users": [{"name": "bench", "user": {"token": TOKEN}}],
                       "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench",
                                                                   "namespace": NAMESPACE}}]}, f)
        pods = PodSignal(NAMESPACE, kubeconfig)
    else:
        pods = FakePods(ports["servers"], scene)
    rss_before = proc_status()
    store = Store.open(f"sqlite:///{tmp}/store.sqlite")
    hub = HubSignal(api, TOKEN, page_size=200, concurrency=10)
    gpu = PrometheusSignal(f"http://127.0.0.1:{ports['prometheus']}")
    probe_tokens = ProbeTokens(api, TOKEN)
    kernels = KernelSignal(probe_tokens, timeout=5.0, concurrency=10)
    stopper = HubStopper(api, TOKEN)
    dispatcher = Dispatcher([LogNotifier()])
    reclaimer = Reclaimer(hub=hub, pods=pods, gpu=gpu, kernels=kernels, stopper=stopper,
                          dispatcher=dispatcher, store=store,
                          settings=ServiceSettings(timeout=CULL_TIMEOUT_S, rules=PolicyRules(
                              PolicyConfig(cpu_timeout=dt.timedelta(seconds=CULL_TIMEOUT_S)))))

    # where the first cycle's time goes: the pods signal's start (import, list) and the
    # decision log (a row per session whose decision changed: all of them at first)
    spent = {"pods_start": 0.0, "record_decision": 0.0}

    def timed(name: str, fn: Any) -> Any:
        if asyncio.iscoroutinefunction(fn):
            async def wrapper(*a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    spent[name] += time.perf_counter() - t0
        else:
            def wrapper(*a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent[name] += time.perf_counter() - t0
        return wrapper

    pods.start = timed("pods_start", pods.start)  # type: ignore[method-assign]
    store.record_decisions = timed("record_decision", store.record_decisions)  # type: ignore[method-assign]
    # as the service does (launcher.serve): the collector's thresholds, then connect to
    # Kubernetes and list the pods, and read the service's scopes (the probe tokens' route,
    # and the sweep of those an earlier run left), before the first cycle
    from jupyterhub_gpu_reclaim.service import collector

    collector.set_thresholds()
    t0 = time.perf_counter()
    await pods.start()
    await probe_tokens.check_scopes()
    startup = time.perf_counter() - t0
    spent["pods_start"] = 0.0
    counts0 = fake_counters(hub_base)
    # a report is kept only as what is read of it, not whole: the service's loop keeps none
    # (launcher.serve), and 20,000 decisions held would count in the peak RSS measured
    c0 = time.process_time()
    first_prof = _profiler(profile)
    first = await reclaimer.run_cycle()
    first_cpu = time.process_time() - c0
    if first_prof:  # the first cycle apart: what it does beyond a steady one
        first_prof.disable()
        first_prof.dump_stats(f"{profile}.first")
    first_seconds, first_probes, first_decisions = first.seconds, first.probes, decisions(first)
    del first
    first_spent = dict(spent)
    before = fake_counters(hub_base)
    first_counts = diff(before, counts0)
    hub_req0, prom0 = hub.requests, gpu.queries
    times, cpu, probes = [], [], []
    prof = _profiler(profile)
    if prof:
        prof.disable()
    last: Any = None
    for _ in range(cycles):
        if prof:
            prof.enable()
        c0 = time.process_time()
        last = None  # the last cycle's report goes before the next is made
        last = await reclaimer.run_cycle()
        cpu.append(time.process_time() - c0)
        if prof:
            prof.disable()
        times.append(last.seconds)
        probes.append(last.probes)
        assert not last.skipped, last.skipped
    after = fake_counters(hub_base)
    await reclaimer.drain()
    for part in (hub, gpu, kernels, stopper):
        await part.close()
    if pods_mode == "watch":
        await pods.stop()
    store.close()
    if prof:
        prof.dump_stats(profile)

    actions: dict[str, int] = {}
    for d in last.decisions.values():
        actions[f"{d.action}/{d.rule}"] = actions.get(f"{d.action}/{d.rule}", 0) + 1
    return {
        "tool": "jupyterhub-gpu-reclaim", "startup": startup, "first": first_seconds, "first_cpu": first_cpu,
        "first_probes": first_probes,
        "first_spent": first_spent, "first_counts": first_counts,
        "steady_record_decision_s": (spent["record_decision"] - first_spent["record_decision"]) / cycles,
        "cycles": summary(times), "times": times, "cpu": cpu,
        "servers": last.servers,
        "gpu_sessions": last.gpu_sessions, "probes_per_cycle": statistics.mean(probes),
        "stops": len(last.stops), "warned": len(last.warned), "decisions": actions,
        "hub_requests_per_cycle_client": (hub.requests - hub_req0) / cycles,
        "prometheus_queries_per_cycle_client": (gpu.queries - prom0) / cycles,
        "fake_counts_per_cycle": {k: v / cycles for k, v in diff(after, before).items()},
        "first_decisions": first_decisions, "last_decisions": decisions(last),
        "pods_view_mib": pods_bytes / 2**20, "pods": pods_mode, "rss_before_cycles": rss_before,
        **proc_status(),
    }
