"""The malformed-answer tests' world (tests/faults/test_malformed*.py): World (fault_world.py)
with a short policy, two bystanders, the GPU data from Prometheus or dcgm-exporters and the
pods from the fake source or the Kubernetes API; the hostile values the tests serve; and
what every such test checks: bystanders warned and reclaimed on schedule in the very cycles
they would be without the fault, each concerned session held with the reason,
`cycles_total` saying what each cycle was, and the last-successful-cycle time moving only
with the cycles that succeeded."""

from __future__ import annotations

import asyncio
import datetime as dt

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.signals.dcgm import DcgmScrapeSignal
from jupyterhub_gpu_reclaim.signals.pods import PodSignal

from .clock import START, at
from .fakes import FakeDcgmExporter, FakeKubeAPI, iso
from .cycles import NS, P
from .fault_world import World

# never-used GPUs warned at 10 min, reclaimed at 20; servers without GPUs culled at 20
POLICY = PolicyConfig(never_used_warn_after=dt.timedelta(minutes=10),
                      never_used_reclaim_after=dt.timedelta(minutes=20),
                      warning_lead=dt.timedelta(minutes=5), cpu_timeout=dt.timedelta(minutes=20))
ABSURD = "9999-12-31T23:59:59-23:59"  # the issue's: OverflowError once converted to UTC
DEEP = b"[" * 100_000 + b"]" * 100_000  # RecursionError in json
HUGE_INT = "9" * 400


class Hostile(World):
    """World with the policy above, bystanders bob (GPU) and carol (no GPU), the GPU data
    from Prometheus or from two dcgm-exporters (`gpu="dcgm"`: node-a and node-b), and the
    pods from the fake in-process source or from the Kubernetes API (`kube=True`: the real
    PodSignal, list and watch)."""

    def __init__(self, tmp_path, gpu: str = "prometheus", kube: bool = False) -> None:
        super().__init__(tmp_path)
        self.tmp_path = tmp_path
        self.policy = POLICY
        self.exporters = {n: FakeDcgmExporter(n) for n in ("node-a", "node-b")} if gpu == "dcgm" else {}
        self.kube = FakeKubeAPI() if kube else None
        self.stamps: list[float] = []

    async def start(self) -> "Hostile":
        for fake in [*self.exporters.values(), *([self.kube] if self.kube else [])]:
            await fake.start()
        if self.kube:
            import kubernetes_asyncio.watch  # noqa: F401  (its first import takes seconds: not in a cycle)
            path = self.tmp_path / "kubeconfig"
            path.write_text(self.kube.kubeconfig())
            self.pods = PodSignal(NS, str(path), watch_timeout=5)  # type: ignore[assignment]
        await super().start()
        self.bob = self.add("bob")
        self.carol = self.add("carol", gpus=0, last_activity=START)
        return self

    def new_reclaimer(self, stop_timeout: float = 0.3):
        reclaimer = super().new_reclaimer(stop_timeout)
        # time enough to read (and refuse) the huge answers on a busy machine
        self.hub_signal.timeout = self.prom_signal.timeout = self.kernel_signal.timeout = 20
        if self.exporters:
            reclaimer.gpu = DcgmScrapeSignal([e.url + "/metrics" for e in self.exporters.values()], timeout=20)
            self.parts.append(reclaimer.gpu)
        self.stamps = [self.metric(P + "last_successful_cycle_timestamp_seconds")]
        return reclaimer

    async def close(self) -> None:
        await super().close()
        if self.kube:
            await self.pods.stop()  # type: ignore[attr-defined]
        for fake in [*self.exporters.values(), *([self.kube] if self.kube else [])]:
            await fake.close()

    def add(self, user: str, *, gpus: int = 1, util: float | None = 0.0, last_activity=None,
            node: str = "node-b") -> str:
        sid = super().add(user, gpus=gpus, util=util, last_activity=last_activity)
        if self.exporters and gpus and util is not None:
            self.exporters[node].util[(NS, f"jupyter-{user}")] = util
        if self.kube:
            self.pods.pods.pop(sid, None)  # type: ignore[attr-defined]  (World.add filled FakePods')
            self.kube.pods[f"jupyter-{user}"] = self.pod(user, gpus)
        return sid

    def pod(self, user: str, gpus: int = 1) -> dict:
        """The pod KubeSpawner makes for `user`, as the API serves it."""
        port = int(self.servers.url.rsplit(":", 1)[1])
        keys = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"jupyter-{user}", "namespace": NS, "creationTimestamp": iso(START),
                         "resourceVersion": "1", "uid": f"uid-{user}", "annotations": dict(keys),
                         "labels": {"component": "singleuser-server", "app": "jupyterhub", **keys}},
            "spec": {"nodeName": "gpu-node-1", "containers": [{
                "name": "notebook", "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02",
                "ports": [{"name": "notebook-port", "containerPort": port, "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1",
                       "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "notebook", "ready": True, "restartCount": 0}]}}

    async def cycle(self):
        report = await super().cycle()
        self.stamps.append(self.metric(P + "last_successful_cycle_timestamp_seconds"))
        return report

    async def until(self, check, what: str) -> None:
        """Wait for the background watch to have applied a change (not a timing assertion:
        the deadline only keeps a broken test from hanging)."""
        for _ in range(3000):  # the watch's re-lists back off: 0.5 s, 1 s, 2 s, ...
            if check():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"never happened: {what}")

    # ---------------------------------------------------------------- what every test checks

    def assert_bystanders_on_schedule(self) -> None:
        assert self.warned(self.bob) == [at(10)] and self.stopped(self.bob) == [at(20)]
        assert self.stopped(self.carol) == [at(20)] and self.warned(self.carol) == []

    def assert_held(self, sid: str, rule: str, problem: str, since: dt.datetime = START,
                    warned: list | tuple = ()) -> None:
        """Held under `rule` in every cycle from `since` on, with `problem` in the decision's
        evidence; warned only as given; never stopped."""
        decisions = [r.decisions[sid] for r in self.reports if r.t >= since]
        assert decisions and {(d.action, d.rule) for d in decisions} == {("hold", rule)}, (sid, decisions[-1])
        assert all(problem in (d.measured.problem or "") for d in decisions), (sid, decisions[-1].measured)
        if rule in ("hub-data-invalid", "pod-data-invalid", "session-error"):  # the reason says it too
            assert problem in decisions[-1].reason
        assert self.warned(sid) == list(warned) and self.stopped(sid) == [], sid
        shown = self.reclaimer.status.sessions[sid]  # what the admin page shows
        assert shown.action == "hold" and shown.rule == rule and problem in shown.evidence["problem"]

    def assert_cycle_metrics_truthful(self) -> None:
        results = ["error" if r.error else f"skipped-{r.skipped}" if r.skipped else
                   f"degraded-{r.degraded}" if r.degraded else "ok" for r in self.reports]
        for result in set(results):
            assert self.metric(P + "cycles_total", result=result) == results.count(result), result
        assert self.metric(P + "cycle_interval_seconds") == 300
        for result, before, after in zip(results, self.stamps, self.stamps[1:], strict=False):
            assert after > before if result == "ok" else after == before, (result, before, after)


def assert_all_ok(w: Hostile) -> None:
    assert all(r.error is None and r.skipped is None for r in w.reports)
    assert w.metric(P + "cycles_total", result="ok") == len(w.reports)
    w.assert_cycle_metrics_truthful()
