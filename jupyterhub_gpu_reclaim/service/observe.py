"""The observe step's parts (`cycle.Reclaimer._observe` runs them): one ready server's session
and sample, the hold of a server whose data cannot be used or seen, and the kernels' probe of
GPU-idle sessions. Each works on what it is handed; what the cycle keeps between cycles stays
in the cycle (idle-culler's cull_arbiter_hook: arbiter.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from dataclasses import replace
from typing import Callable, Literal

from ..wording import server_name
from ..policy.observations import Decision, Sample, Session
from ..policy.evidence import Measured
from ..signals.http_source import SignalError
from ..signals.hub import HubServer
from ..signals.interfaces import KernelSource
from ..signals.pods import PodInfo, PodSnapshot
from ..signals.probe_token_client import NoProbeCredential
from ..timestamps import format_time
from .cycle_types import CycleReport, Observation
from .metrics import Metrics

log = logging.getLogger("jupyterhub_gpu_reclaim.service")

# no pods: a hub without Kubernetes (no pod source), or no pod list read yet
NO_PODS = PodSnapshot(by_session={}, pending_gpus=0)


def observe_server(srv: HubServer, pod: PodInfo | None, readings: dict | None, now: dt.datetime,
                   stale_after: dt.timedelta) -> tuple[Session, Sample]:
    """The session and this cycle's sample of one ready server (kernels not probed yet)."""
    gpus = pod.gpus if pod else 0
    util = mem = None
    shared = bool(pod and pod.gpu_shared)  # a time-sliced replica, by its resource name
    if pod is not None and gpus and readings is not None:
        reading = readings.get((pod.namespace, pod.name))
        if reading is not None and now - reading.t <= stale_after:
            util, mem = reading.util, reading.fb_used_mib
            shared = shared or reading.shared  # or by the exporter's series
    # the profile the spawner applied (a spawn naming none gets the default one); a pod
    # without the annotation (a plain KubeSpawner's) has the one the user named
    profile = (pod.profile if pod is not None and pod.profile is not None
               else str(srv.user_options.get("profile") or ""))
    session = Session(id=srv.session_id, user=srv.user, server=srv.name, gpus=gpus,
                      started=srv.started or (pod.created if pod else None) or now,
                      admin=srv.admin, profile=profile,
                      groups=_group_set(srv.groups), gpu_type=pod.gpu_type if pod else "",
                      gpu_shared=shared)
    return session, Sample(t=now, gpu_util=util, gpu_mem_used_mib=mem, kernels=None,
                           terminals=None, hub_last_activity=srv.last_activity)


@functools.lru_cache(maxsize=1024)
def _group_set(groups: tuple[str, ...]) -> frozenset[str]:
    """The users of the same groups share one set (a hub has a few sets of groups, not one
    a server: at 20,000 servers one each took 3 MiB a cycle)."""
    return frozenset(groups)


def unusable(srv: HubServer, pod: PodInfo | None, *, kubernetes: bool, report: CycleReport,
             metrics: Metrics) -> Decision | None:
    """The hold of a session whose hub model or pod cannot be used, or None."""
    sid = srv.session_id
    source: Literal["hub", "pods"]
    if srv.invalid:
        source, rule, problem = "hub", "hub-data-invalid", srv.invalid
    elif pod is None and not kubernetes:
        return None  # a hub without Kubernetes: a server without GPUs
    elif pod is None:
        return Decision(sid, "hold", "pod-missing",
                        "the server's pod is not in the pod list; never reclaimed unseen")
    elif pod.invalid:
        source, rule, problem = "pods", "pod-data-invalid", pod.invalid
    else:
        return None
    metrics.signal_errors.labels(source).inc()
    report.problem(sid, source, problem)
    return Decision(sid, "hold", rule, f"{problem}; never reclaimed on data that cannot be read",
                    measured=Measured(problem=problem))

def unseen(srv: HubServer, pod: PodInfo | None, as_of: dt.datetime | None, problem: str) -> Decision | None:
    """While the pod list cannot be read: None for a server the last list read (at
    `as_of`) showed running without GPUs, since before that list (it is decided as a
    server without GPUs); the hold of any other."""
    if (pod is not None and not pod.invalid and not pod.gpus and pod.ready and as_of is not None
            and srv.started is not None and srv.started <= as_of):
        return None
    why = ("its GPUs cannot be seen" if pod is not None and pod.gpus else
           f"the last pod list read ({format_time(as_of)}) does not show it as a running server "
           "without GPUs" if as_of else "no pod list has been read since the service started")
    return Decision(srv.session_id, "hold", "pods-unavailable",
                    f"the pod list cannot be read ({problem}): {why}; never reclaimed unseen",
                    measured=Measured(problem=problem, pods_as_of=as_of))


async def probe_kernels(kernels_of: KernelSource, sids: list[str], seen: Observation, report: CycleReport,
                        metrics: Metrics, hold: Callable[[str, Exception], Decision]) -> None:
    """Ask the kernels of these sessions (their samples get the answers)."""
    async def one(sid: str) -> None:
        o = seen.sessions[sid]
        try:
            probed = await kernels_of.probe_all(o.server.user, o.server.name, o.server.url,
                                                o.pod.direct_url if o.pod else None)
        except SignalError as e:
            if not isinstance(e, NoProbeCredential):  # that one is logged once, where found
                metrics.signal_errors.labels(e.source).inc()
                log.warning("kernels of %s: %s", server_name(sid), e.message)
            report.problem(sid, "kernels", e.message)
            return  # kernels stay None: the policy holds a reclaim
        except Exception as e:
            seen.held[sid] = hold(sid, e)
            return
        o.sample = replace(o.sample, kernels=tuple(probed.kernels), terminals=tuple(probed.terminals))
        o.ran = probed.ran

    report.probes = len(sids)
    await asyncio.gather(*(one(sid) for sid in sids))
