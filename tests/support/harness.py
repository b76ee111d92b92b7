"""The reclaim cycle (service.Reclaimer) with in-process fakes for the signals and the
stopper, a real Store and a controllable clock: `Harness` steps its clock by `step` (=
ServiceSettings.cycle_interval) between cycles (the `harness` fixture: tests/service/conftest.py)."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.service.hub_stopper import StopResult
from jupyterhub_gpu_reclaim.service.metrics import Metrics
from jupyterhub_gpu_reclaim.service.notify import Dispatcher, LogNotifier
from jupyterhub_gpu_reclaim.policy.observations import Kernel, WhatRan, WhatSaved
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.replay.backtest import Z2JH_CULL_TIMEOUT
from jupyterhub_gpu_reclaim.policy.rules import PolicyRules
from jupyterhub_gpu_reclaim.service.cycle import Reclaimer
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.signals.http_source import SignalError
from jupyterhub_gpu_reclaim.signals.gpu_readings import GpuReading
from jupyterhub_gpu_reclaim.signals.hub import HubServer
from jupyterhub_gpu_reclaim.signals.kernels import Probed
from jupyterhub_gpu_reclaim.signals.pods import PodInfo, PodSnapshot
from jupyterhub_gpu_reclaim.store import Store

from .clock import START, YALE_NEVER_USED
from .cycles import NS, STEP, CycleRecorder


class FakeHub:
    def __init__(self) -> None:
        self.servers: dict[str, HubServer] = {}
        self.inactive: list[dict] = []
        self.fail: str | None = None
        self.calls = 0

    async def ready_servers(self) -> list[HubServer]:
        self.calls += 1
        if self.fail:
            raise SignalError("hub", self.fail)
        return list(self.servers.values())

    async def inactive_users(self) -> list[dict]:
        return list(self.inactive)


class FakePods:
    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self.pending_gpus = 0
        self.fail: str | None = None
        self.started = 0

    async def start(self) -> None:
        self.started += 1

    def snapshot(self, max_age: float) -> PodSnapshot:
        if self.fail:
            raise SignalError("pods", self.fail)
        return PodSnapshot(by_session=dict(self.pods), pending_gpus=self.pending_gpus)


class FakeGpu:
    """util[(namespace, pod)]: the utilization of each GPU (a tuple), read at the clock's now
    (or `age` earlier)."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.util: dict[tuple[str, str], tuple] = {}
        self.age = dt.timedelta(0)
        self.calls = 0

    async def utilization(self) -> dict[tuple[str, str], GpuReading]:
        self.calls += 1
        t = self.clock() - self.age
        return {key: GpuReading(t=t, gpus=tuple(str(i) for i in range(len(u))), util=tuple(u),
                                fb_used_mib=tuple(0.0 for _ in u))
                for key, u in self.util.items()}


class FakeKernels:
    def __init__(self) -> None:
        self.states: dict[str, list[str]] = {}  # server url → kernel states
        self.ran: dict[str, WhatRan] = {}  # server url → what runs there (absent: not known)
        self.calls: list[tuple[str, str | None]] = []
        self.saved: dict[str, WhatSaved] = {}  # server url → what its tabs save (absent: not known)
        self.asks: list[tuple[str, bool, float]] = []  # (server url, dry run, wait) of each ask to save

    async def probe_all(self, user: str, server: str, server_url_path: str, direct_url: str | None = None) -> Probed:
        self.calls.append((server_url_path, direct_url))
        return Probed([Kernel(execution_state=s) for s in self.states.get(server_url_path, [])], [],
                      self.ran.get(server_url_path))

    async def ask_to_save(self, user: str, server: str, server_url_path: str, direct_url: str | None, *,
                          dry_run: bool, wait: float) -> WhatSaved | None:
        self.asks.append((server_url_path, dry_run, wait))
        return self.saved.get(server_url_path)


class FakeStopper:
    """Stops at once: the server leaves the hub's list and its pod goes."""

    def __init__(self, hub: FakeHub, pods: FakePods) -> None:
        self.hub, self.pods = hub, pods
        self.calls: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    async def stop(self, user: str, server: str = "") -> StopResult:
        self.calls.append((user, server))
        self.hub.servers.pop(f"{user}/{server}", None)
        self.pods.pods.pop(f"{user}/{server}", None)
        return StopResult("stopped", 1, 0.0)

    async def delete_user(self, user: str) -> StopResult:
        self.deleted.append(user)
        self.hub.inactive = [u for u in self.hub.inactive if u["name"] != user]
        return StopResult("stopped", 1, 0.0)


class Harness(CycleRecorder):
    def __init__(self, tmp_path, *, policy: PolicyConfig | None = None, rules: PolicyRules | None = None,
                 gpu: bool = True, kernels: bool = True, step: dt.timedelta = STEP, store_url: str | None = None,
                 **options) -> None:
        self.now = [START]
        self.step = step
        self.hub, self.pods = FakeHub(), FakePods()
        self.gpu = FakeGpu(self.clock) if gpu else None
        self.kernels = FakeKernels() if kernels else None
        self.stopper = FakeStopper(self.hub, self.pods)
        self.store = Store.open(store_url or f"sqlite:///{tmp_path}/store.sqlite")
        # servers without GPUs culled after the z2jh chart's --timeout, as the tests' numbers assume
        self.policy = policy or PolicyConfig(**YALE_NEVER_USED, cpu_timeout=Z2JH_CULL_TIMEOUT)
        self.rules = rules
        self.options = options
        self.reports: list = []
        self.dispatcher = self.reclaimer = self.metrics = None
        self.new_reclaimer()

    def clock(self) -> dt.datetime:
        return self.now[0]

    def new_reclaimer(self) -> Reclaimer:
        """A fresh service on the same store (a restart): new metrics, empty memory."""
        dry_run = self.options.get("dry_run", False)
        self.dispatcher = Dispatcher([LogNotifier()], dry_run=dry_run)
        self.metrics = Metrics()
        self.reclaimer = Reclaimer(
            hub=self.hub, pods=self.pods, gpu=self.gpu, kernels=self.kernels, stopper=self.stopper,
            dispatcher=self.dispatcher, store=self.store,
            settings=ServiceSettings(rules=self.rules or PolicyRules(self.policy),
                                     cull_every=int(self.step.total_seconds()), **self.options),
            metrics=self.metrics, clock=self.clock)
        return self.reclaimer

    def add(self, user: str, *, gpus: int | None = 1, util=(0.0,), name: str = "",
            started: dt.datetime = START, last_activity: dt.datetime | None = None, **user_fields) -> str:
        """A ready server; `gpus` None: its pod is missing; `util` None: no GPU reading."""
        sid = f"{user}/{name}"
        self.hub.servers[sid] = HubServer(user=user, name=name, started=started, ready=True,
                                          last_activity=last_activity, url=f"/user/{user}/{name}",
                                          **user_fields)
        if gpus is not None:
            pod = f"jupyter-{user}" + (f"--{name}" if name else "")
            self.pods.pods[sid] = PodInfo(namespace=NS, name=pod, user=user, server=name, gpus=gpus,
                                          node="gpu-node-1", phase="Running", ready=True,
                                          pod_ip="10.0.0.7", port=8888, created=started,
                                          unschedulable=None)
            if gpus and util is not None and self.gpu is not None:
                self.gpu.util[(NS, pod)] = tuple(util)
        return sid

    def set_util(self, user: str, util) -> None:
        self.gpu.util[(NS, f"jupyter-{user}")] = tuple(util)

    # what happened, by session (cycle, run_until, warned, stopped, metric: CycleRecorder)
    def decisions(self, sid: str) -> list[tuple[dt.datetime, str, str]]:
        return [(r.t, r.decisions[sid].action, r.decisions[sid].rule) for r in self.reports
                if sid in r.decisions]
