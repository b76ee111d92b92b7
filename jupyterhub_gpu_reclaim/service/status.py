"""The latest cycle as the web pages and the JSON API show it: each server's state (what the
cycle saw and decided, the warning, intent and exemption that apply, its recent
utilization) and the servers waiting for a GPU.

The reclaimer publishes one `CycleStatus` per cycle (`Reclaimer.status`); the web's controls
amend a session in it at once after a user's or an admin's change, and the next cycle
decides with the change. Values are plain (numbers, strings, aware datetimes), so the API
writes them as they are.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence, cast

from ..wording import server_name
from ..policy.observations import Decision, Exemption, Intent, Sample, Session, Warning
from ..policy.evidence import Measured

if TYPE_CHECKING:
    from ..signals.node_gpus import GpuCounts, GpuKinds
    from ..signals.pods import PodInfo

log = logging.getLogger("jupyterhub_gpu_reclaim.service")

SPARK_WINDOW = dt.timedelta(hours=2)  # what the sparkline shows: the last two hours,
SPARK_POINTS = 60  # in this many equal slices (2 min each), whatever the cycle interval


@dataclass(frozen=True, slots=True)
class KernelCounts:
    busy: int
    idle: int
    last_activity: dt.datetime | None


@dataclass(slots=True)
class SessionStatus:
    """One running server (GPU or not) as the pages show it. Not changed in place: a change
    between cycles replaces it (`CycleStatus.amend`)."""

    session: str  # "user/server"
    user: str
    server: str
    profile: str = ""
    node: str | None = None
    gpus: int = 0
    gpu_kinds: GpuKinds = ()  # its pod's (PodInfo.gpu_kinds, shared): what `kinds` reads
    gpu_type: str = ""  # the GPU product its pod selects ("": not selected)
    gpu_shared: bool = False  # a time-sliced GPU: its utilization is not this server's alone
    started: dt.datetime | None = None
    url: str = ""  # the server's URL on the hub: the pages' own, never in the API
    util_now: list[float | None] | None = None  # per GPU; None: no GPU data
    mem_mib: list[float | None] | None = None
    util_mean: list[float | None] = field(default_factory=list)  # per GPU over the retained window
    util_max: list[float | None] = field(default_factory=list)
    # mean over the GPUs per slice of the last SPARK_WINDOW, oldest first (None: no data)
    spark: list[float | None] = field(default_factory=list)
    idle_threshold: float | None = None  # the session's gpu_idle_threshold (%), drawn on the sparkline
    kernels: KernelCounts | None = None  # None: not probed this cycle
    hub_last_activity: dt.datetime | None = None
    action: str | None = None  # the decision
    rule: str | None = None
    reason: str | None = None
    # the decision itself: its evidence (`evidence`) is made when a page or the API asks, not
    # at every cycle for every server (8 MiB at 20,000 servers, mostly never read)
    decision: Decision | None = field(default=None, repr=False)
    policy_rule: str | None = None  # the policy rule whose settings decided (None: the base policy)
    idle_since: dt.datetime | None = None  # when the decision's idle episode began
    # what the decision measured, typed (the pages' own: the API has it in the evidence)
    measured: Measured = Measured()
    reclaim_at: dt.datetime | None = None
    warned_at: dt.datetime | None = None
    intent_until: dt.datetime | None = None  # capped at max_keepalive from when it was set
    intent_set_at: dt.datetime | None = None
    exempt_until: dt.datetime | None = None
    exempt_by: str | None = None
    stopping: bool = False

    @property
    def kinds(self) -> GpuCounts:
        """Its GPUs by kind, as the pages name them (node_gpus.in_words: "1 MIG slice"), the
        queue's `WaitingServer.kinds` alike: as its pod asks for them; whole GPUs where no
        kind was said (a status not made from a pod)."""
        return dict(self.gpu_kinds) if self.gpu_kinds else ({"gpu": self.gpus} if self.gpus else {})

    @property
    def evidence(self) -> dict[str, Any]:
        """The decision's evidence, as the pages and the API show it (`Decision.shown`)."""
        return self.decision.shown() if self.decision is not None else {}

    def to_dict(self) -> dict[str, Any]:
        """Its fields (the lists shared, not copied: a page or API answer's), its evidence and
        its GPUs by kind."""
        out = {name: getattr(self, name) for name in _SESSION_FIELDS}
        out["kernels"] = asdict(self.kernels) if self.kernels is not None else None
        return out


_SESSION_FIELDS = tuple({"decision": "evidence", "gpu_kinds": "kinds"}.get(f.name, f.name)
                        for f in fields(SessionStatus) if f.name != "measured")


@dataclass(frozen=True)
class WaitingServer:
    """A server whose pod waits for a GPU."""

    session: str
    user: str
    server: str
    kinds: dict[str, int] = field(hash=False)  # the GPUs it asks for by kind (pod_facts.GpuWait): the pages' words
    since: dt.datetime | None
    waited_s: float | None
    reason: str | None  # the scheduler's message
    gpu_type: str = ""  # the GPU product it asks for ("": any)
    gpu_shared: bool = False  # it asks for a time-sliced GPU
    # when enough GPUs it can use are due to be freed by scheduled reclaims, after those
    # the servers ahead of it wait for (None: no reclaim is scheduled that would do)
    expected_free_at: dt.datetime | None = None

    @property
    def gpus(self) -> int:
        return sum(self.kinds.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gpus": self.gpus}


@dataclass(frozen=True)
class Freeing:
    """GPUs a session is due to give back: at its warning's reclaim time, or now when its
    stop is under way."""

    at: dt.datetime
    gpus: int
    gpu_type: str = ""
    gpu_shared: bool = False


def freeing(info: SessionStatus, session: Session, now: dt.datetime) -> Freeing | None:
    """What `session` is due to free, going by its published status: a stop under way, or
    a warning not ended by an intent or an exemption; None otherwise."""
    if not info.gpus:
        return None
    if info.stopping:
        return Freeing(now, info.gpus, session.gpu_type, session.gpu_shared)
    if (info.warned_at is None or info.reclaim_at is None or info.exempt_until is not None
            or (info.intent_until is not None and info.intent_until > now)):
        return None
    return Freeing(max(now, info.reclaim_at), info.gpus, session.gpu_type, session.gpu_shared)


def expect_free(queue: list[WaitingServer], due: Iterable[Freeing]) -> list[WaitingServer]:
    """The queue (in its order: waiting_servers) with each server's `expected_free_at`: the time by
    which the scheduled reclaims, in time order, have freed all the GPUs it asks for, each
    freed GPU going to the first server in the queue that can use it (the same product, or
    any when it names none; time-sliced for time-sliced) and still lacks one. None when they
    never do: no guess is made."""
    lacking = [q.gpus for q in queue]
    expected: list[dt.datetime | None] = [None] * len(queue)
    for f in sorted(due, key=lambda f: f.at):
        for _ in range(f.gpus):
            taker = next((i for i, q in enumerate(queue) if lacking[i] and q.gpu_shared == f.gpu_shared
                          and (not q.gpu_type or q.gpu_type == f.gpu_type)), None)
            if taker is None:
                break
            lacking[taker] -= 1
            if not lacking[taker]:
                expected[taker] = f.at
    return [replace(q, expected_free_at=at) for q, at in zip(queue, expected, strict=True)]


@dataclass
class CycleStatus:
    """The latest cycle: when (None before the first), the signal that skipped it (its
    sessions are then the cycle's before), the sessions, the GPU queue and the cluster's
    GPUs (None: not known)."""

    t: dt.datetime | None = None
    skipped: str | None = None
    sessions: dict[str, SessionStatus] = field(default_factory=dict)
    queue: list[WaitingServer] = field(default_factory=list)  # in the GPU queue's order (waiting_servers)
    gpu_capacity: GpuCounts | None = None  # by kind (signals.node_gpus)

    def amend(self, sid: str, **changes: Any) -> None:
        """A change made between cycles (a new intent, an exemption, a stop begun), shown at
        once; a session no longer running is left out."""
        if sid in self.sessions:
            self.sessions[sid] = replace(self.sessions[sid], **changes)

    def stopped(self, sid: str) -> None:
        """A stop of `sid` completed between cycles: the pages stop showing it at once (not
        "will be reclaimed at …" until the next cycle)."""
        self.sessions.pop(sid, None)


def session_status(session: Session, sample: Sample, decision: Decision | None, *, pod: PodInfo | None,
                   url: str, hub_last_activity: dt.datetime | None, history: Sequence[Sample],
                   warnings: Sequence[Warning], intent: Intent | None, exemption: Exemption | None,
                   max_keepalive: dt.timedelta, stopping: bool, idle_threshold: float | None = None) -> SessionStatus:
    """The status of one session, whose pod is `pod` (None: none seen): `history` is its
    retained samples (the utilization), `warnings` its open warnings, oldest first."""
    try:
        per_gpu, spark = _utilization(history, session.gpus, sample.t)
        kernels = _kernels(sample)
    except Exception as e:  # shown blank; the decision is already made
        log.warning("session %s: its activity cannot be shown: %s: %s", server_name(session.id), type(e).__name__, e)
        per_gpu, spark, kernels = [[] for _ in range(session.gpus)], [], None
    d = decision
    return SessionStatus(
        session=session.id, user=session.user, server=session.server, profile=session.profile,
        node=pod.node if pod else None, gpus=session.gpus,
        # the session's GPUs are its pod's (observe_server), none where it could not be observed
        gpu_kinds=pod.gpu_kinds if pod and session.gpus else (),
        gpu_type=session.gpu_type, gpu_shared=session.gpu_shared,
        started=session.started, url=url,
        util_now=list(sample.gpu_util) if sample.gpu_util is not None else None,
        mem_mib=list(sample.gpu_mem_used_mib) if sample.gpu_mem_used_mib is not None else None,
        util_mean=[sum(g) / len(g) if g else None for g in per_gpu],
        util_max=[max(g) if g else None for g in per_gpu],
        spark=spark, idle_threshold=idle_threshold if session.gpus else None,
        kernels=kernels, hub_last_activity=hub_last_activity,
        action=d.action if d else None, rule=d.rule if d else None, reason=d.reason if d else None,
        decision=d, policy_rule=d.policy_rule if d else None,
        idle_since=d.idle_since if d else None, measured=d.measured if d else Measured(),
        reclaim_at=warnings[-1].reclaim_at if warnings else (d.reclaim_at if d else None),
        warned_at=warnings[-1].t if warnings else None,
        intent_until=min(intent.until, intent.set_at + max_keepalive) if intent else None,
        intent_set_at=intent.set_at if intent else None,
        exempt_until=exemption.until if exemption else None,
        exempt_by=exemption.by if exemption else None,
        stopping=stopping)


def waiting_servers(pods: Iterable[PodInfo], now: dt.datetime) -> list[WaitingServer]:
    """The servers whose pods wait for a GPU, in the GPU queue's order: both as the spawner
    tells its users (pod_facts.GpuWait: higher priority first, then the longest waiting)."""
    waiting = sorted(((p, w) for p in pods if (w := p.gpu_wait)), key=lambda pw: pw[1].queue_key(pw[0].name))
    return [WaitingServer(session=p.session_id, user=p.user, server=p.server, kinds=w.kinds, since=w.since,
                          waited_s=(now - w.since).total_seconds() if w.since else None,
                          reason=p.unschedulable, gpu_type=p.gpu_type, gpu_shared=p.gpu_shared)
            for p, w in waiting]


def _utilization(history: Sequence[Sample], gpus: int,
                 now: dt.datetime) -> tuple[list[list[float]], list[float | None]]:
    """Per GPU the utilization of the retained samples, and the sparkline: the last
    SPARK_WINDOW up to `now` in SPARK_POINTS slices, each the mean over the GPUs of the
    samples in it (None where no sample has every GPU's value), so that its x axis is time."""
    per_gpu: list[list[float]] = [[] for _ in range(gpus)]
    if not gpus:
        return per_gpu, []
    sums, counts = [0.0] * SPARK_POINTS, [0] * SPARK_POINTS
    start, width = now - SPARK_WINDOW, SPARK_WINDOW / SPARK_POINTS
    for s in history:
        u = s.gpu_util
        if u is None or len(u) != gpus or None in u:
            continue
        values = cast("tuple[float, ...]", u)  # no None: checked above
        for g, x in zip(per_gpu, values, strict=True):  # len(values) == gpus
            g.append(float(x))
        if start < s.t <= now:  # a slice holds (its start, its end]: the latest sample is in the last
            i = min(SPARK_POINTS - 1, max(0, -(-(s.t - start) // width) - 1))
            sums[i] += sum(values) / gpus
            counts[i] += 1
    return per_gpu, [sums[i] / counts[i] if counts[i] else None for i in range(SPARK_POINTS)]


def _kernels(sample: Sample) -> KernelCounts | None:
    if sample.kernels is None:
        return None
    acts = [k.last_activity for k in sample.kernels if k.last_activity is not None]
    return KernelCounts(busy=sum(k.execution_state == "busy" for k in sample.kernels),
                        idle=sum(k.execution_state != "busy" for k in sample.kernels),
                        last_activity=max(acts) if acts else None)
