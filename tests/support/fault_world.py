"""The faults tests' world: the real signals and HubStopper against the HTTP fakes
(fakes.py), a fake pod source, and a Reclaimer on a real store with a controllable clock."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from jupyterhub_gpu_reclaim.service.hub_stopper import HubStopper
from jupyterhub_gpu_reclaim.service.metrics import Metrics
from jupyterhub_gpu_reclaim.service.notify import Dispatcher, LogNotifier
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.replay.backtest import Z2JH_CULL_TIMEOUT
from jupyterhub_gpu_reclaim.service.cycle import Reclaimer
from jupyterhub_gpu_reclaim.policy.rules import PolicyRules
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.signals.http_source import SignalError
from jupyterhub_gpu_reclaim.signals.hub import HubSignal
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
from jupyterhub_gpu_reclaim.signals.pods import PodInfo, PodSnapshot
from jupyterhub_gpu_reclaim.signals.prometheus import PrometheusSignal
from jupyterhub_gpu_reclaim.store import Store

from .clock import START, YALE_NEVER_USED
from .cycles import NS, STEP, CycleRecorder
from .hubapi import StaticProbeToken
from .fakes import FakeHubAPI, FakePrometheus, FakeServers

TOKEN = "fault-test-token-7c1d9e"


class FakePods:
    """In-process pod source; `fail` makes `snapshot` raise as PodSignal does when its
    watch has been down too long (e.g. re-lists after 410 Gone keep failing)."""

    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self.fail: str | None = None

    async def start(self) -> None:
        pass

    def snapshot(self, max_age: float) -> PodSnapshot:
        if self.fail:
            raise SignalError("pods", self.fail)
        return PodSnapshot(by_session=dict(self.pods), pending_gpus=0)


class World(CycleRecorder):
    """The fakes, the real signals and a Reclaimer on a real store."""

    step = STEP

    def __init__(self, tmp_path) -> None:
        self.now = [START]
        self.hub = FakeHubAPI()
        self.prom = FakePrometheus(self.clock)
        self.servers = FakeServers()
        self.pods = FakePods()
        self.store = Store.open(f"sqlite:///{tmp_path}/store.sqlite")
        # servers without GPUs culled after the z2jh chart's --timeout, as the tests' numbers assume
        self.policy = PolicyConfig(**YALE_NEVER_USED, cpu_timeout=Z2JH_CULL_TIMEOUT)
        self.reports: list = []
        self.parts: list = []
        self.reclaimer: Reclaimer | None = None
        self.metrics: Metrics | None = None

    def clock(self) -> dt.datetime:
        return self.now[0]

    async def start(self) -> "World":
        for fake in (self.hub, self.prom, self.servers):
            await fake.start()
        self.new_reclaimer()
        return self

    def new_reclaimer(self, stop_timeout: float = 0.3) -> Reclaimer:
        """The service (re)started: fresh signals, metrics and memory; the same store."""
        # the fakes answer at once; a request timing out is a fault's hang, not a busy machine
        # (0.3 s was passed by a loaded one: a cycle skipped where none should be)
        self.hub_signal = HubSignal(self.hub.api, TOKEN, timeout=1.0)
        self.prom_signal = PrometheusSignal(self.prom.url, timeout=1.0)
        self.kernel_signal = KernelSignal(StaticProbeToken(TOKEN), timeout=1.0)
        self.stopper = HubStopper(self.hub.api, TOKEN, stop_timeout=stop_timeout, poll_interval=0.05,
                                  retries=1, backoff=0.01, request_timeout=1.0)
        self.parts += [self.hub_signal, self.prom_signal, self.kernel_signal, self.stopper]
        self.metrics = Metrics()
        self.reclaimer = Reclaimer(
            hub=self.hub_signal, pods=self.pods, gpu=self.prom_signal, kernels=self.kernel_signal,
            stopper=self.stopper, dispatcher=Dispatcher([LogNotifier()]), store=self.store,
            settings=ServiceSettings(rules=PolicyRules(self.policy), cull_every=int(STEP.total_seconds())),
            metrics=self.metrics,
            clock=self.clock)
        return self.reclaimer

    async def close(self) -> None:
        if self.reclaimer is not None:
            await self.reclaimer.cancel()
        for part in self.parts:
            await part.close()
        for fake in (self.hub, self.prom, self.servers):
            await fake.close()
        self.store.close()

    def add(self, user: str, *, gpus: int = 1, util: float | None = 0.0,
            last_activity: dt.datetime | None = None) -> str:
        sid = self.hub.add_server(user, started=START, last_activity=last_activity)
        port = int(self.servers.url.rsplit(":", 1)[1])
        pod = f"jupyter-{user}"
        self.pods.pods[sid] = PodInfo(namespace=NS, name=pod, user=user, server="", gpus=gpus,
                                      node="gpu-node-1", phase="Running", ready=True,
                                      pod_ip="127.0.0.1", port=port, created=START, unschedulable=None)
        if gpus and util is not None:
            self.prom.util[(NS, pod)] = util
        return sid

    def decisions(self, sid: str, since: dt.datetime = START, until: dt.datetime | None = None) -> set:
        return {(r.decisions[sid].action, r.decisions[sid].rule) for r in self.reports
                if sid in r.decisions and since <= r.t and (until is None or r.t <= until)}

    def warning_rows(self) -> int:
        with self.store.engine.connect() as c:
            return c.execute(sa.text("SELECT count(*) FROM warnings")).scalar_one()
