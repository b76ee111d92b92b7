"""A store's records for the backtest's and the what-if's tests: sessions of a few kinds
(used then idle, training, a slow loader), recorded cycle by cycle as the service does."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.policy.observations import Kernel, Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.store import Store

UTC = dt.timezone.utc
NOW = dt.datetime.now(UTC).replace(second=0, microsecond=0)
STEP = dt.timedelta(minutes=5)


def session(sid: str, started: dt.datetime, gpus: int = 1) -> Session:
    user, server = sid.split("/")
    return Session(id=sid, user=user, server=server, gpus=gpus, started=started, profile="a100")


def used_then_idle(t: dt.datetime, started: dt.datetime) -> Sample:
    """GPU at 90% for the first 30 minutes, then 0%; kernel idle, browser tab open."""
    busy = t - started < dt.timedelta(minutes=30)
    return Sample(t=t, gpu_util=(90.0 if busy else 0.0,), gpu_mem_used_mib=(900.0,),
                  kernels=(Kernel("idle", started),), terminals=(), hub_last_activity=t)


def training(t: dt.datetime, started: dt.datetime) -> Sample:
    """A training cell: GPU 95%, kernel busy."""
    return Sample(t=t, gpu_util=(95.0,), gpu_mem_used_mib=(30000.0,),
                  kernels=(Kernel("busy", t),), terminals=(), hub_last_activity=started)


def slow_loader(t: dt.datetime, started: dt.datetime) -> Sample:
    """A GPU at 5% all the time (a slow data loader), kernel idle, tab open."""
    return Sample(t=t, gpu_util=(5.0,), gpu_mem_used_mib=(4000.0,),
                  kernels=(Kernel("idle", started),), terminals=(), hub_last_activity=t)


def record(store: Store, start: dt.datetime, hours: float, kinds: dict[str, object],
           stop: bool = False, step: dt.timedelta = STEP) -> None:
    """One cycle every ``step`` from ``start`` for ``hours``, as the service records them."""
    sessions = [session(sid, start) for sid in kinds]
    t = start
    while t < start + dt.timedelta(hours=hours):
        store.record_observations(t, [SessionSample(s.id, kinds[s.id](t, start)) for s in sessions], 0, sessions)
        t += step
    if stop:
        for s in sessions:
            store.session_stopped(s.id, t)
