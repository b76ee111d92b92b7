"""The reclaim cycle: signals → observations → policy → actions and store.

`Reclaimer.run_cycle()` reads the hub's ready servers, the single-user pods and the GPU
utilization, probes the kernels of GPU sessions whose GPUs look idle, builds one
`SessionView` per server, asks the policy, then warns, stops (through the hub API only)
and records. What it never does:

* decide on a cycle whose hub or pod listing failed (it cannot tell GPU servers from
  others then: the cycle is skipped and counted);
* treat a server whose pod it cannot see as a server without GPUs (it is held);
* let one session's data stop the cycle: a malformed entry (a server's model, its pod, a
  GPU series, its kernels) holds only its own session, and an unexpected error while
  observing or deciding one session holds that session (logged once with its traceback,
  counted). A cycle that raises all the same is counted as an error
  (`cycles_total{result="error"}`); only ok cycles move the last-successful-cycle time;
* reclaim on missing GPU or kernel data (the policy holds);
* stop a server twice: a stop runs as a task recorded in the store before it begins;
  a stop that never finishes is "stuck" and retried each cycle; after a restart, stops
  that were under way are finished (or found done) first.

History. Each session's samples are kept in memory (trimmed by `policy.retained_samples`)
and reloaded from the store after a restart. A gap in the observations longer than
`stale_after` — the service was down, or met the session late — is unknown time: a
missing-data marker restarts the session's idle clock instead of counting the gap as idle.
A gap is longer than one cycle interval plus `stale_after`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Protocol, TypeVar
from urllib.parse import urlencode

from .actions import HubStopper, StopResult
from .metrics import Metrics
from .notify import Dispatcher
from .observations import Decision, Sample, Session, SessionView
from .oneline import brief
from .policy import IDLE_RULES, decide, decide_user, retained_samples
from .policy_config import PolicyConfig
from .signals.base import SignalError, entry_field, entry_time
from .signals.hub import HubServer
from .signals.interfaces import GpuSource, HubSource, KernelSource
from .signals.pods import PodInfo, PodSnapshot
from .signals.probe_tokens import NoProbeCredential
from .store import Store
from .timestamps import format_time, parse_time, utcnow
from .trace import TraceSample, TraceSession
from .trace_export import export_records

log = logging.getLogger("jupyterhub_gpu_reclaim.service")

EPSILON = dt.timedelta(microseconds=1)
T = TypeVar("T")


class PodSource(Protocol):
    async def start(self) -> None: ...

    def snapshot(self, max_age: float) -> PodSnapshot: ...


@dataclass
class Options:
    """What the cycle needs beyond the policy (see config.GpuReclaim for each one's help)."""

    dry_run: bool = False
    cull_users: bool = False
    keepalive_url: str = ""
    hub_name: str = "JupyterHub"
    record_observations: bool = True
    observation_retention: dt.timedelta = dt.timedelta(days=14)
    record_retention: dt.timedelta = dt.timedelta(days=90)  # ended intents, warnings, the audit log
    history_lookback: dt.timedelta | None = None  # reloaded after a restart; None: from the policy
    cycle_interval: dt.timedelta = dt.timedelta(minutes=5)  # --cull-every


@dataclass
class CycleReport:
    """What one cycle saw and did (for logs, tests and the benchmark)."""

    t: dt.datetime
    skipped: str | None = None  # the signal whose failure skipped the cycle
    servers: int = 0
    gpu_sessions: int = 0
    probes: int = 0
    decisions: dict[str, Decision] = field(default_factory=dict)
    warned: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)  # stops begun (not in dry run)
    would_reclaim: list[str] = field(default_factory=list)  # dry run
    users_deleted: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # why the cycle raised (cycles_total{result="error"})
    seconds: float = 0.0


def _exempted(d: Decision, exemption: dict | None) -> Decision:
    """An admin's exemption (web admin page) turns a warn or reclaim into a keep."""
    if exemption is None or d.action == "keep" and d.rule == "exempt":
        return d
    return Decision(d.session, "keep", "exempt",
                    f"exempted by {exemption['by']} until {format_time(exemption['until'])}",
                    evidence={**d.evidence, "exempt": "admin", "exempt_by": exemption["by"],
                              "exempt_until": format_time(exemption["until"])})


def _episode(decision: Decision, session: Session) -> str:
    """The idle episode a warning belongs to: the rule and when the episode began."""
    if decision.rule == "max-age":
        return f"max-age@{format_time(session.started)}"
    since = decision.evidence.get("idle_since")
    return f"{decision.rule}@{since or format_time(session.started)}"


class Reclaimer:
    def __init__(self, *, hub: HubSource, pods: PodSource, gpu: GpuSource | None,
                 kernels: KernelSource | None, stopper: HubStopper, dispatcher: Dispatcher,
                 store: Store, policy: PolicyConfig, options: Options | None = None,
                 metrics: Metrics | None = None,
                 clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.hub, self.pods, self.gpu, self.kernels = hub, pods, gpu, kernels
        self.stopper, self.dispatcher, self.store = stopper, dispatcher, store
        self.policy = policy
        self.options = options or Options()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.metrics.dry_run.set(1 if self.options.dry_run else 0)
        self.metrics.cycle_interval.set(self.options.cycle_interval.total_seconds())
        self.metrics.last_successful_cycle.set(time.time())  # what "no cycle succeeded for" counts from
        self._failing: dict[str, str] = {}  # sid → the unexpected error already logged for it
        self._history: dict[str, tuple[dt.datetime, list[Sample]]] = {}
        self._recorded: set[tuple[str, dt.datetime]] = set()  # session lines already stored
        self._last: dict[str, tuple[str, str]] = {}  # sid → (action, rule) of the last cycle
        self._would_reclaim: set[str] = set()  # dry run: episodes already reported
        self._live: set[str] = set()
        self._tasks: dict[str, asyncio.Task] = {}  # sid (or "user:NAME") → stop task
        self._restored = False
        self._last_prune = 0.0
        # what the web pages read: the latest cycle's sessions and GPU queue (see snapshot())
        self._snapshot: dict[str, Any] = {"t": None, "skipped": None, "sessions": {}, "queue": []}

    # ------------------------------------------------------------------ lifecycle

    def restore(self) -> None:
        """Reload recent samples from the store (after a restart)."""
        self._restored = True
        if not self.options.record_observations:
            return
        now = self.clock()
        p = self.policy
        lookback = self.options.history_lookback or (
            2 * max(p.idle_reclaim_after, p.never_used_reclaim_after) + p.warning_lead + p.stale_after)
        n = 0
        for rec in export_records(self.store, since=now - lookback, until=now, intents=False):
            if isinstance(rec, TraceSession):
                self._history[rec.id] = (rec.session.started, [])
                self._recorded.add((rec.id, rec.session.started))
            elif isinstance(rec, TraceSample) and rec.session in self._history:
                self._history[rec.session][1].append(rec.sample)
                n += 1
        if n:
            log.info("restored %d samples of %d sessions from %s", n, len(self._history), self.store.name)

    async def drain(self) -> None:
        """Wait for the stops under way."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel the stops under way (shutdown): they stay unfinished in the store and are
        finished after the restart."""
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    # ------------------------------------------------------------------ the cycle

    def _error(self, report: CycleReport, e: SignalError) -> None:
        log.warning("signal %s failed: %s", e.source, e.message)
        self.metrics.signal_errors.labels(e.source).inc()
        report.errors[e.source] = e.message

    async def run_cycle(self) -> CycleReport:
        t0 = time.monotonic()
        now = self.clock()
        report = CycleReport(t=now)
        try:
            if not self._restored:
                self.restore()
            await self._cycle(now, report)
        except Exception as e:  # the store, a bug: the next cycle tries again
            report.error = f"{type(e).__name__}: {str(e)[:200]}"
            log.exception("the cycle failed")
        report.seconds = time.monotonic() - t0
        self.metrics.cycle_duration.observe(report.seconds)
        result = "error" if report.error else f"skipped-{report.skipped}" if report.skipped else "ok"
        self.metrics.cycles.labels(result).inc()
        self.metrics.last_cycle.set(time.time())
        if result == "ok":
            self.metrics.last_successful_cycle.set(time.time())
        eventful = (report.warned or report.stops or report.would_reclaim or report.skipped or report.errors
                    or report.error)
        log.log(logging.INFO if eventful else logging.DEBUG,
                "cycle: %d servers (%d with GPUs), %d probes, %d warned, %d stops%s%s in %.2f s",
                report.servers, report.gpu_sessions, report.probes, len(report.warned),
                len(report.stops), f", {len(report.would_reclaim)} would be reclaimed (dry run)"
                if self.options.dry_run else "",
                f", skipped: {report.skipped} unavailable" if report.skipped else
                f", failed: {report.error}" if report.error else "", report.seconds)
        return report

    async def _read(self, source: str, read: Awaitable[T], report: CycleReport) -> T | None:
        """One signal's answer, or None when it failed (logged and counted): a SignalError,
        or anything unexpected (a bug, an answer no check foresaw; logged with its traceback)."""
        try:
            return await read
        except SignalError as e:
            self._error(report, e)
        except Exception as e:
            log.exception("signal %s failed unexpectedly", source)
            self._error(report, SignalError(source, f"{type(e).__name__}: {str(e)[:200]}"))
        return None

    async def _pods(self, stale_s: float) -> PodSnapshot:
        await self.pods.start()
        return self.pods.snapshot(stale_s)

    def _session_error(self, sid: str, e: Exception, report: CycleReport) -> Decision:
        """An unexpected error while observing or deciding one session: it is held, the
        error counted, and logged with its traceback once (until the session recovers)."""
        what = f"{type(e).__name__}: {brief(str(e))}"
        if self._failing.get(sid) != what:
            self._failing[sid] = what
            log.error("session %s held: unexpected %s", sid, what, exc_info=e)
        self.metrics.session_errors.inc()
        report.errors[f"session:{sid}"] = what
        return Decision(sid, "hold", "session-error",
                        f"an unexpected error while deciding ({what}); never reclaimed on it",
                        evidence={"problem": what})

    def _unusable(self, srv: HubServer, pod: PodInfo | None, report: CycleReport) -> Decision | None:
        """The hold of a session whose hub model or pod cannot be used, or None."""
        sid = srv.session_id
        if srv.invalid:
            source, rule, problem = "hub", "hub-data-invalid", srv.invalid
        elif pod is None:
            return Decision(sid, "hold", "pod-missing",
                            "the server's pod is not in the pod list; never reclaimed unseen")
        elif pod.invalid:
            source, rule, problem = "pods", "pod-data-invalid", pod.invalid
        else:
            return None
        self.metrics.signal_errors.labels(source).inc()
        report.errors[f"{source}:{sid}"] = problem
        return Decision(sid, "hold", rule, f"{problem}; never reclaimed on data that cannot be read",
                        evidence={"problem": problem})

    def _observe(self, srv: HubServer, pod: PodInfo | None, readings: dict | None,
                 now: dt.datetime) -> tuple[Session, Sample]:
        gpus = pod.gpus if pod else 0
        session = Session(id=srv.session_id, user=srv.user, server=srv.name, gpus=gpus,
                          started=srv.started or (pod.created if pod else None) or now,
                          admin=srv.admin, profile=str(srv.user_options.get("profile") or ""),
                          groups=frozenset(srv.groups))
        util = mem = None
        if pod is not None and gpus and readings is not None:
            reading = readings.get((pod.namespace, pod.name))
            if reading is not None and now - reading.t <= self.policy.stale_after:
                util, mem = reading.util, reading.fb_used_mib
        return session, Sample(t=now, gpu_util=util, gpu_mem_used_mib=mem, kernels=None,
                               terminals=None, hub_last_activity=srv.last_activity)

    async def _cycle(self, now: dt.datetime, report: CycleReport) -> None:
        self._retry_unfinished(now)
        stale_s = self.policy.stale_after.total_seconds()
        # the three reads are independent: run them together
        gpu_source = getattr(self.gpu, "source", "gpu")
        servers, pods, readings = await asyncio.gather(
            self._read("hub", self.hub.ready_servers(), report),
            self._read("pods", self._pods(stale_s), report),
            self._read(gpu_source, self.gpu.utilization(), report) if self.gpu else asyncio.sleep(0))
        if servers is None or pods is None:
            # without both we cannot tell GPU sessions from others: decide nothing
            report.skipped = "hub" if servers is None else "pods"
            self._snapshot = {**self._snapshot, "skipped": report.skipped}
            return
        report.servers = len(servers)
        self.metrics.pending_gpus.set(pods.pending_gpus)

        # observations; `held`: sessions decided without the policy (data that cannot be used)
        sessions: dict[str, tuple[HubServer, Session, Sample, PodInfo | None]] = {}
        held: dict[str, Decision] = {}
        probe: list[str] = []
        for srv in servers:
            sid = srv.session_id
            if sid in self._tasks:
                continue  # being stopped
            pod = pods.by_session.get(sid)
            try:
                session, sample = self._observe(srv, pod, readings, now)
                hold = self._unusable(srv, pod, report)
            except Exception as e:
                session = Session(id=sid, user=srv.user, server=srv.name, gpus=0, started=now)
                sample, hold = Sample(t=now, gpu_util=None), self._session_error(sid, e, report)
            sessions[sid] = (srv, session, sample, pod)
            if hold is not None:
                held[sid] = hold
            if session.gpus:
                report.gpu_sessions += 1
                util = sample.gpu_util
                if (hold is None and self.kernels is not None and util is not None and len(util) == session.gpus
                        and all(u is not None and u < self.policy.gpu_idle_threshold for u in util)):
                    probe.append(sid)  # GPU-idle: only then is a busy kernel worth asking about

        if probe:
            await self._probe(probe, sessions, held, report)
        self._sessions_gone(set(sessions), now)

        # decisions
        intents = self.store.intents()
        exemptions = self.store.exemptions(now)  # set by admins on the web admin page
        for sid, (srv, session, sample, pod) in sessions.items():
            if sid not in held and pod is not None and pod.keepalive_until is not None:
                try:
                    self._intent_from_spawn(sid, pod, intents, now)
                except Exception as e:
                    held[sid] = self._session_error(sid, e, report)
        warnings = self.store.open_warnings()
        by_user: dict[str, list[tuple[Session, Decision]]] = {}
        state_counts: dict[tuple[str, str, str], int] = {}
        holds: dict[str, int] = {}
        idle_gpus = 0
        idle_hours = 0.0
        observed: list[tuple[str, Sample]] = []
        new_sessions: list[Session] = []
        changed: list[Decision] = []
        warns: list[tuple[Session, Decision]] = []
        for sid, (srv, session, sample, pod) in sessions.items():
            d = held.get(sid)
            if d is None:
                try:
                    samples = self._samples(session, sample, now)
                    view = SessionView(session=session, samples=samples, intent=intents.get(sid),
                                       warnings=warnings.get(sid, ()))
                    d = decide(view, now=now, pending_gpus=pods.pending_gpus, config=self.policy)
                    d = _exempted(d, exemptions.get(sid))
                    if d.rule == "kernel-data-missing" and f"kernels:{sid}" in report.errors:
                        d = replace(d, evidence={**d.evidence, "problem": report.errors[f"kernels:{sid}"]})
                    if session.gpus and d.rule in IDLE_RULES:
                        since = parse_time(d.evidence.get("idle_since"))
                        if since is not None:
                            idle_hours += session.gpus * max(0.0, (now - since).total_seconds()) / 3600
                    if d.evidence.get("episode_cleared"):
                        self.store.close_episode(
                            sid, [parse_time(t) for t in d.evidence.get("cleared_warnings", [])], t=now)
                    self._failing.pop(sid, None)
                except Exception as e:
                    d = self._session_error(sid, e, report)
                else:
                    if session.gpus:
                        observed.append((sid, sample))
                        if (sid, session.started) not in self._recorded:
                            new_sessions.append(session)
            report.decisions[sid] = d
            key = ("true" if session.gpus else "false", d.action, d.rule)
            state_counts[key] = state_counts.get(key, 0) + 1
            if d.action == "hold":
                holds[d.rule] = holds.get(d.rule, 0) + 1
            if session.gpus and d.rule in IDLE_RULES:
                idle_gpus += session.gpus
            if self._last.get(sid) != (d.action, d.rule):
                self._last[sid] = (d.action, d.rule)
                changed.append(d)
            if d.action == "warn":
                warns.append((session, d))
            elif d.action == "reclaim":
                by_user.setdefault(session.user, []).append((session, d))

        self.store.record_decisions(changed, now)
        self._publish(now, sessions, report, pods, intents, exemptions)
        await asyncio.gather(*(self._warn(session, d, now, report) for session, d in warns))
        self._set_state_metrics(state_counts, holds, idle_gpus, idle_hours)
        if self.options.record_observations and observed:
            self.store.record_observations(now, observed, pods.pending_gpus, new_sessions)
            self._recorded.update((s.id, s.started) for s in new_sessions)
        self._prune(now)

        for user, reclaims in by_user.items():
            try:
                self._reclaim(user, reclaims, servers, now, report)
            except Exception:  # one user's stops must not keep the others' from starting
                log.exception("the reclaim of %s's servers failed", user)
        if self.options.cull_users and not self.options.dry_run:
            await self._cull_inactive_users(now, report)

    # ------------------------------------------------------------------ for the web pages

    def snapshot(self) -> dict[str, Any]:
        """The latest cycle as the web pages show it: {"t", "skipped", "sessions": {sid:
        dict}, "queue": [dict]} (plain JSON-able values; times as datetimes)."""
        return self._snapshot

    def _publish(self, now: dt.datetime, sessions: dict, report: CycleReport, pods: PodSnapshot,
                 intents: dict, exemptions: dict) -> None:
        warnings = self.store.open_warnings()
        out: dict[str, dict[str, Any]] = {}
        for sid, (srv, session, sample, pod) in sessions.items():
            d = report.decisions.get(sid)
            try:
                per_gpu, spark, kernels = self._activity(session, sample)
            except Exception as e:  # shown blank; the decision is already made
                log.warning("session %s: its activity cannot be shown: %s: %s", sid, type(e).__name__, e)
                per_gpu, spark, kernels = [[] for _ in range(session.gpus)], [], None
            warned = warnings.get(sid, ())
            intent = intents.get(sid)
            out[sid] = {
                "session": sid, "user": session.user, "server": session.server,
                "profile": session.profile, "node": pod.node if pod else None, "gpus": session.gpus,
                "started": session.started, "url": srv.url,
                "util_now": list(sample.gpu_util) if sample.gpu_util is not None else None,
                "mem_mib": list(sample.gpu_mem_used_mib) if sample.gpu_mem_used_mib is not None else None,
                "util_mean": [sum(g) / len(g) if g else None for g in per_gpu],
                "util_max": [max(g) if g else None for g in per_gpu],
                "spark": spark[-60:], "kernels": kernels,
                "hub_last_activity": srv.last_activity,
                "action": d.action if d else None, "rule": d.rule if d else None,
                "reason": d.reason if d else None, "evidence": dict(d.evidence) if d else {},
                "reclaim_at": (warned[-1].reclaim_at if warned else (d.reclaim_at if d else None)),
                "warned_at": warned[-1].t if warned else None,
                "intent_until": (min(intent.until, intent.set_at + self.policy.max_keepalive)
                                 if intent else None),
                "intent_set_at": intent.set_at if intent else None,
                "exempt_until": exemptions[sid]["until"] if sid in exemptions else None,
                "exempt_by": exemptions[sid]["by"] if sid in exemptions else None,
                "stopping": sid in self._tasks,
            }
        queue = [{"session": p.session_id, "user": p.user, "server": p.server, "gpus": p.gpus,
                  "since": p.created, "waited_s": (now - p.created).total_seconds() if p.created else None,
                  "reason": p.unschedulable}
                 for p in pods.by_session.values() if p.waits_for_gpu]
        queue.sort(key=lambda q: q["since"] or now)
        self._snapshot = {"t": now, "skipped": None, "sessions": out, "queue": queue,
                          "pending_gpus": pods.pending_gpus}

    def _activity(self, session: Session, sample: Sample) -> tuple[list[list[float]], list[float | None], dict | None]:
        """Per GPU the utilization history, the sparkline, and the kernels, for the pages."""
        history = self._history.get(session.id, (None, []))[1] if session.gpus else []
        per_gpu: list[list[float]] = [[] for _ in range(session.gpus)]
        spark: list[float | None] = []
        for s in history:
            u = s.gpu_util
            if u is None or len(u) != session.gpus or any(x is None for x in u):
                spark.append(None)
                continue
            spark.append(sum(u) / len(u))  # type: ignore[arg-type]
            for i, x in enumerate(u):
                per_gpu[i].append(float(x))  # type: ignore[arg-type]
        kernels = None
        if sample.kernels is not None:
            acts = [k.last_activity for k in sample.kernels if k.last_activity is not None]
            kernels = {"busy": sum(k.execution_state == "busy" for k in sample.kernels),
                       "idle": sum(k.execution_state != "busy" for k in sample.kernels),
                       "last_activity": max(acts) if acts else None}
        return per_gpu, spark, kernels

    def stop_now(self, user: str, server: str, *, by: str, rule: str = "admin",
                 record: bool = True) -> bool:
        """Stop a server at once (through the hub API, as every stop): an admin's "reclaim
        now" (recorded as a reclaim, rule "admin") or a user's own "stop now" (record=False).
        False when a stop of it is already under way."""
        sid = f"{user}/{server}"
        if sid in self._tasks:
            return False
        now = self.clock()
        info = self._snapshot["sessions"].get(sid) or {}
        gpus = int(info.get("gpus") or 0)
        rid = None
        if record:
            rid = self.store.begin_reclaim(sid, rule, now, {"by": by}, gpus,
                                           episode=f"{rule}@{format_time(now)}")
            if rid is None:
                return False

        async def stop() -> None:
            log.info("stop %s now, asked by %s", sid, by)
            result = await self.stopper.stop(user, server)
            if rid is not None:
                self._finish(rid, sid, rule, gpus, result)
            elif result.ok:
                self.store.session_stopped(sid, self.clock())
                self.store.close_episode(sid, t=self.clock())
                self._history.pop(sid, None)

        task = asyncio.create_task(stop(), name=f"stop {sid} ({by})")
        self._tasks[sid] = task
        task.add_done_callback(lambda _t: self._tasks.pop(sid, None))
        if sid in self._snapshot["sessions"]:
            self._snapshot["sessions"][sid]["stopping"] = True
        return True

    def retry_stuck(self, sid: str) -> bool:
        """Retry the stuck stop of ``sid`` now (the cycle retries them too). False when none."""
        if sid in self._tasks:
            return False
        records = [r for r in self.store.stuck_reclaims() if r.session == sid]
        if not records:
            return False
        self._retry_unfinished(self.clock())
        return True

    def _intent_from_spawn(self, sid: str, pod: PodInfo, intents: dict, now: dt.datetime) -> None:
        """The keep-alive declared on the spawn form is the session's first intent, once per
        server start: an intent set or cleared since the pod was created (the keep-alive page,
        the API, an admin) wins, and a cleared one stays cleared. A keep-alive already over
        changes nothing."""
        assert pod.keepalive_until is not None
        set_at = min(pod.created or now, now)
        current = intents.get(sid)
        if (current is not None and current.set_at >= set_at) or pod.keepalive_until <= now:
            return
        if current is None:
            changed = self.store.intent_changed_at(sid)  # asked only of sessions without an intent
            if changed is not None and (changed >= set_at or pod.created is None):
                return
        intents[sid] = self.store.set_intent(sid, pod.keepalive_until, set_at, by="spawn form")
        log.info("intent of %s from the spawn form: keep until %s", sid, format_time(pod.keepalive_until))

    def _samples(self, session: Session, sample: Sample, now: dt.datetime) -> tuple[Sample, ...]:
        """The session's retained history with the new sample appended (see module doc)."""
        started, kept = self._history.get(session.id, (session.started, []))
        if started != session.started:
            kept = []  # a new instance under the same name
        last = kept[-1].t if kept else None
        max_gap = self.options.cycle_interval + self.policy.stale_after
        if session.gpus and (last if last is not None else session.started) < now - max_gap:
            kept.append(Sample(t=now - EPSILON, gpu_util=None, kernels=None, terminals=None))
        kept.append(sample)
        kept = list(retained_samples(kept, now=now, config=self.policy, gpus=session.gpus))
        self._history[session.id] = (session.started, kept)
        return tuple(kept)

    async def _probe(self, sids: list[str], sessions: dict, held: dict[str, Decision],
                     report: CycleReport) -> None:
        assert self.kernels is not None

        async def one(sid: str) -> None:
            srv, session, sample, pod = sessions[sid]
            try:
                kernels, terminals = await self.kernels.probe(srv.user, srv.name, srv.url,
                                                              pod.direct_url if pod else None)
            except SignalError as e:
                if not isinstance(e, NoProbeCredential):  # that one is logged once, where found
                    self.metrics.signal_errors.labels(e.source).inc()
                    log.warning("kernels of %s: %s", sid, e.message)
                report.errors[f"kernels:{sid}"] = e.message
                return  # kernels stay None: the policy holds a reclaim
            except Exception as e:
                held[sid] = self._session_error(sid, e, report)
                return
            sample = Sample(t=sample.t, gpu_util=sample.gpu_util, gpu_mem_used_mib=sample.gpu_mem_used_mib,
                            kernels=tuple(kernels), terminals=tuple(terminals),
                            hub_last_activity=sample.hub_last_activity)
            sessions[sid] = (srv, session, sample, pod)

        report.probes = len(sids)
        await asyncio.gather(*(one(sid) for sid in sids))

    def _sessions_gone(self, present: set[str], now: dt.datetime) -> None:
        """Sessions no longer ready: note them stopped; their open warnings end."""
        release = getattr(self.kernels, "release", None)  # the probe credential goes too
        for sid in self._live - present - set(self._tasks):
            if release is not None:
                release(sid)
            self._history.pop(sid, None)
            self._last.pop(sid, None)
            self._failing.pop(sid, None)
            self.store.session_stopped(sid, now)
            self.store.close_episode(sid, t=now)
        self._live = present | set(self._tasks)

    def _set_state_metrics(self, counts: dict, holds: dict, idle_gpus: int, idle_hours: float) -> None:
        m = self.metrics
        m.sessions.clear()
        for (gpu, action, rule), n in counts.items():
            m.sessions.labels(gpu, action, rule).set(n)
        m.holds.clear()
        for reason, n in holds.items():
            m.holds.labels(reason).set(n)
        m.idle_gpus.set(idle_gpus)
        m.idle_gpu_hours.set(round(idle_hours, 6))

    def _prune(self, now: dt.datetime) -> None:
        if time.monotonic() - self._last_prune > 3600:
            self._last_prune = time.monotonic()
            self.store.prune_observations(now - self.options.observation_retention)
            self.store.prune_records(now - self.options.record_retention)

    # ------------------------------------------------------------------ actions

    async def _warn(self, session: Session, d: Decision, now: dt.datetime, report: CycleReport) -> None:
        from .observations import Warning

        assert d.reclaim_at is not None
        warning = Warning(session=session.id, t=now, rule=d.rule, reclaim_at=d.reclaim_at)
        channels = [getattr(n, "name", type(n).__name__) for n in self.dispatcher.notifiers]
        try:
            # recorded first: a restart between the two never sends it twice
            if not self.store.record_warning(warning, _episode(d, session), channels):
                return
            report.warned.append(session.id)
            self.metrics.warnings.labels(d.rule).inc()
            log.info("warn %s (%s): %s", session.id, d.rule, d.reason)
            await self._notify(d, session, now)
        except Exception:  # one warning must not keep the others, or the reclaims, from going out
            log.exception("the warning of %s failed", session.id)

    async def _notify(self, d: Decision, session: Session, now: dt.datetime) -> None:
        url = self.options.keepalive_url
        if url:  # the keep-alive page opens with this session selected
            url += ("&" if "?" in url else "?") + urlencode({"session": session.id})
        results = await self.dispatcher.notify(d, session, keepalive_url=url,
                                               hub_name=self.options.hub_name, now=now)
        for name, ok in results.items():
            if not ok:
                self.metrics.notification_errors.labels(name).inc()

    def _reclaim(self, user: str, reclaims: list[tuple[Session, Decision]], servers: list[HubServer],
                 now: dt.datetime, report: CycleReport) -> None:
        begun: list[tuple[Session, Decision, int]] = []
        for session, d in reclaims:
            if self.options.dry_run:
                key = f"{session.id} {_episode(d, session)}"
                if key not in self._would_reclaim:
                    self._would_reclaim.add(key)
                    report.would_reclaim.append(session.id)
                    self.metrics.reclaims.labels(d.rule, "dry-run").inc()
                    log.info("[dry run] would reclaim %s (%s): %s", session.id, d.rule, d.reason)
                continue
            # one record per attempt: after a failed stop the next cycle tries again
            rid = self.store.begin_reclaim(session.id, d.rule, now, d.evidence, session.gpus,
                                           episode=f"{_episode(d, session)} {format_time(now)}")
            if rid is None:
                continue  # a stop of it is under way or stuck
            begun.append((session, d, rid))
            report.stops.append(session.id)
        if not begun:
            return
        # with --cull-users the user goes too once all of their servers are stopped
        mine = [s for s in servers if s.user == user]
        cull_user = (self.options.cull_users and len(begun) == len(mine))
        key = f"user:{user}"
        task = asyncio.create_task(self._stop_all(begun, mine[0] if cull_user else None), name=f"stop {user}")
        for session, _, _ in begun:
            self._tasks[session.id] = task
        self._tasks[key] = task
        task.add_done_callback(lambda _t: [self._tasks.pop(k, None) for k in
                                           [key, *(s.id for s, _, _ in begun)]])

    async def _stop_all(self, begun: list[tuple[Session, Decision, int]], user: HubServer | None) -> None:
        results = await asyncio.gather(*(self._stop_one(s, d, rid) for s, d, rid in begun))
        if user is not None and all(r.ok for r in results):
            now = self.clock()
            delete, why = decide_user(admin=user.admin, created=user.user_created,
                                      last_activity=user.user_last_activity, now=now, config=self.policy)
            if delete:
                log.info("culling user %s (%s)", user.user, why)
                if (await self.stopper.delete_user(user.user)).ok:
                    self.metrics.users_deleted.inc()

    async def _stop_one(self, session: Session, d: Decision, rid: int) -> StopResult:
        log.info("reclaim %s (%s): %s", session.id, d.rule, d.reason)
        result = await self.stopper.stop(session.user, session.server)
        self._finish(rid, session.id, d.rule, session.gpus, result)
        if result.ok and session.gpus:
            await self._notify(d, session, self.clock())
        return result

    def _finish(self, rid: int, sid: str, rule: str, gpus: int, result: StopResult) -> None:
        now = self.clock()
        self.store.finish_reclaim(rid, now, result.outcome, result.detail)
        self.metrics.reclaims.labels(rule, result.outcome).inc()
        if result.ok:
            self.metrics.reclaimed_gpus.inc(gpus)
            self.store.session_stopped(sid, now)
            self.store.close_episode(sid, t=now)
            self._history.pop(sid, None)
        self.metrics.stuck_stops.set(len(self.store.stuck_reclaims()))

    def _retry_unfinished(self, now: dt.datetime) -> None:
        """Stops left stuck, or unfinished by a service that died: stop them again (a
        stopped server answers at once)."""
        for record in self.store.stuck_reclaims() + self.store.unfinished_reclaims():
            if record.session in self._tasks:
                continue
            user, _, server = record.session.partition("/")
            log.info("retrying the %s stop of %s begun %s", record.outcome or "unfinished",
                     record.session, format_time(record.t))

            async def again(record=record, user=user, server=server) -> None:
                result = await self.stopper.stop(user, server)
                self._finish(record.id, record.session, record.rule, record.gpus, result)

            task = asyncio.create_task(again(), name=f"retry stop {record.session}")
            self._tasks[record.session] = task
            task.add_done_callback(lambda _t, sid=record.session: self._tasks.pop(sid, None))

    async def _cull_inactive_users(self, now: dt.datetime, report: CycleReport) -> None:
        """--cull-users for users with no running server, as idle-culler does each cycle."""
        inactive = getattr(self.hub, "inactive_users", None)
        if inactive is None:
            return
        users = await self._read("hub", inactive(), report)
        for user in users or ():
            if f"user:{user['name']}" in self._tasks:
                continue
            try:  # a user model that cannot be read is never a reason to delete its user
                admin, created, last_activity = (entry_field(user, "admin", bool, False), entry_time(user, "created"),
                                                 entry_time(user, "last_activity"))
            except ValueError as e:
                log.warning("not culling user %s: the hub's model of the user: %s", user["name"], e)
                continue
            delete, why = decide_user(admin=admin, created=created, last_activity=last_activity, now=now,
                                      config=self.policy)
            if delete:
                log.info("culling user %s (%s)", user["name"], why)
                if (await self.stopper.delete_user(user["name"])).ok:
                    report.users_deleted.append(user["name"])
                    self.metrics.users_deleted.inc()
