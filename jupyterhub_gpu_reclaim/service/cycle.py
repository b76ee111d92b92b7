"""The reclaim cycle: signals → observations → policy → actions and store.

`Reclaimer.run_cycle()` runs one cycle in three steps:

* observe (`_observe`): read the hub's ready servers, the single-user pods and the GPU
  utilization, build one `Session` and `Sample` per server, and probe the kernels of GPU
  sessions whose GPUs look idle;
* decide (`_decide`): take a keep-alive from the spawn form as the first intent, ask the
  policy about each session (with its history, intent and warnings, under the settings
  of the first policy rule that matches it, `policy/rules.py`), apply admins' exemptions;
* act (`_act`): record the changed decisions, publish the pages' status (`status.py`),
  warn, set the state metrics, record the observations, and begin the stops
  (`stops.py`, through the hub API only).

What it never does:

* decide on a cycle whose hub listing failed (the cycle is skipped and counted);
* treat a server whose pod it cannot see as a server without GPUs (it is held). While the
  pod list cannot be read, the servers the last list read showed as running without GPUs
  (since before that list) are decided with it, as servers without GPUs; every other one
  is held ("pods-unavailable"), and the cycle is counted as degraded. On a hub without
  Kubernetes (no pod source) every server is a server without GPUs;
* let one session's data stop the cycle: a malformed entry (a server's model, its pod, a
  GPU series, its kernels) holds only its own session, and an unexpected error while
  observing or deciding one session holds that session (logged once with its traceback,
  counted). A cycle that raises all the same is counted as an error
  (`cycles_total{result="error"}`); only ok cycles move the last-successful-cycle time;
* reclaim on missing GPU or kernel data (the policy holds);
* stop a server twice (see `stops.py`).

The samples each session's decisions rest on are its `SampleHistory` (`sample_history.py`):
kept across cycles, reloaded after a restart, a gap in them unknown time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import replace
from functools import partial
from typing import Awaitable, Callable, TypeVar
from urllib.parse import urlencode

from .hub_stopper import HubStopper
from .cycle_types import CycleReport, Decisions, Observation, Observed, PodSource, Reclaim
from .metrics import Metrics
from .notify import Dispatcher
from ..wording import server_name
from ..policy.observations import Decision, Sample, Session, SessionSample, SessionView, Warning
from ..policy.evidence import Measured
from ..oneline import brief
from ..policy.decider import IDLE_RULES
from ..policy.step import step
from .sample_history import SampleHistory
from ..signals.http_source import SignalError
from ..signals.interfaces import GpuSource, HubSource, KernelSource
from ..signals.pods import PodInfo, PodSnapshot
from .status import CycleStatus, expect_free, freeing, session_status, waiting_servers
from .arbiter import CullArbiter
from .observe import NO_PODS, observe_server, probe_kernels, unseen, unusable
from .stops import Stops
from ..store import Store
from ..settings.service_options import ServiceSettings
from ..store.engine import RowsRefused
from ..timestamps import evidence_time, format_time, utcnow

log = logging.getLogger("jupyterhub_gpu_reclaim.service")

T = TypeVar("T")


def _episode(decision: Decision, session: Session) -> str:
    """The idle episode a warning or reclaim belongs to: the rule and when the episode began."""
    if decision.rule == "max-age":
        return f"max-age@{format_time(session.started)}"
    # the episode's start as the evidence writes it: the store's episodes are keyed by it
    since = evidence_time(decision.idle_since)
    return f"{decision.rule}@{since or format_time(session.started)}"


class Reclaimer:
    def __init__(self, *, hub: HubSource, pods: PodSource | None, gpu: GpuSource | None,
                 kernels: KernelSource | None, stopper: HubStopper, dispatcher: Dispatcher,
                 store: Store, settings: ServiceSettings | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.hub, self.pods, self.gpu, self.kernels = hub, pods, gpu, kernels
        self.stopper, self.dispatcher, self.store = stopper, dispatcher, store
        self.settings = settings = settings or ServiceSettings()
        policy = self.policy = settings.policy  # the base policy; a session a policy rule matches has the rule's
        self.rules = settings.rules
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.metrics.dry_run.set(1 if settings.dry_run else 0)
        self.metrics.cycle_interval.set(settings.cycle_interval.total_seconds())
        self.metrics.last_successful_cycle.set(time.time())  # what "no cycle succeeded for" counts from
        self.history = SampleHistory(policy, settings.cycle_interval, self.rules.configs[1:])
        self.stops = Stops(stopper=stopper, store=store, metrics=self.metrics, policy=policy, clock=clock,
                           dry_run=settings.dry_run, cull_users=settings.cull_users,
                           notify=self._notify, forget=self._stopped, kernels=kernels,
                           save_wait=settings.save_before_stop)
        self._failing: dict[str, str] = {}  # sid → the unexpected error already logged for it
        self._last: dict[str, tuple[str, str]] = {}  # sid → (action, rule) of the last cycle
        self._live: set[str] = set()
        self._restored = False
        self._last_prune = 0.0
        self.status = CycleStatus()  # what the web pages show: the latest cycle
        self._stopped_since_observed: set[str] = set()  # stops completed during the cycle under way
        self._last_pods: tuple[dt.datetime, PodSnapshot] | None = None  # the last pod list read, and when
        self.arbiter = (CullArbiter(settings.cull_arbiter_hook, settings.cull_arbiter_timeout)
                        if settings.cull_arbiter_hook is not None else None)

    # ------------------------------------------------------------------ lifecycle

    def restore(self) -> None:
        """Reload recent samples from the store (after a restart)."""
        self._restored = True
        self.history.restore(self.store, self.clock())

    async def drain(self) -> None:
        """Wait for the stops under way."""
        await self.stops.drain()

    async def cancel(self) -> None:
        """Cancel the stops under way (shutdown): they stay unfinished in the store and are
        finished after the restart."""
        await self.stops.cancel()

    # ------------------------------------------------------------------ the cycle

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
        result = ("error" if report.error else f"skipped-{report.skipped}" if report.skipped
                  else f"degraded-{report.degraded}" if report.degraded else "ok")
        self.metrics.cycles.labels(result).inc()
        self.metrics.last_cycle.set(time.time())
        if result == "ok":
            self.metrics.last_successful_cycle.set(time.time())
        eventful = (report.warned or report.stops or report.would_reclaim or report.skipped or report.errors
                    or report.problems or report.error)
        log.log(logging.INFO if eventful else logging.DEBUG,
                "cycle: %d servers (%d with GPUs), %d probes, %d warned, %d stops%s%s in %.2f s",
                report.servers, report.gpu_sessions, report.probes, len(report.warned),
                len(report.stops), f", {len(report.would_reclaim)} would be reclaimed (dry run)"
                if self.settings.dry_run else "",
                f", skipped: {report.skipped} unavailable" if report.skipped else
                f", failed: {report.error}" if report.error else
                f", {report.degraded} unavailable (decided with the last list read)" if report.degraded else "",
                report.seconds)
        return report

    async def _cycle(self, now: dt.datetime, report: CycleReport) -> None:
        self.stops.retry_unfinished()
        self._stopped_since_observed.clear()
        seen = await self._observe(now, report)
        if seen is None:
            return
        decided = self._decide(seen, now, report)
        await self._act(seen, decided, now, report)

    # ------------------------------------------------------------------ observe

    async def _observe(self, now: dt.datetime, report: CycleReport) -> Observation | None:
        """Read the signals and observe each ready server; None when the hub could not be
        read (the cycle is skipped)."""
        stale_s = self.policy.stale_after.total_seconds()
        # the three reads are independent: run them together
        gpu_source = getattr(self.gpu, "source", "gpu")
        servers, pods, readings = await asyncio.gather(
            self._read("hub", self.hub.ready_servers(), report),
            self._read("pods", self._pods(stale_s), report) if self.pods else asyncio.sleep(0, NO_PODS),
            self._read(gpu_source, self.gpu.utilization(), report) if self.gpu else asyncio.sleep(0))
        if servers is None:  # which servers? decide nothing
            report.skipped = "hub"
            self.status = replace(self.status, skipped=report.skipped)
            return None
        report.servers = len(servers)
        if pods is None:  # the pod list cannot be read: the last one read, if any
            report.degraded = "pods"
            pods_as_of, pods = self._last_pods or (None, NO_PODS)
        else:
            if self.pods is not None:
                self._last_pods = (now, pods)
            pods_as_of = None
            self.metrics.pending_gpus.set(pods.pending_gpus)

        seen = Observation(servers, pods, {}, {}, pods_as_of)
        probe: list[str] = []
        for srv in servers:
            sid = srv.session_id
            if sid in self.stops.tasks:
                continue  # being stopped
            pod = pods.by_session.get(sid)
            try:
                session, sample = observe_server(srv, pod, readings, now, self.policy.stale_after)
                hold = (unseen(srv, pod, pods_as_of, report.errors.get("pods", "")) if report.degraded and not srv.invalid
                        else unusable(srv, pod, kubernetes=self.pods is not None, report=report, metrics=self.metrics))
                if pod and readings and (r := readings.get((pod.namespace, pod.name))) and r.problem:
                    report.problem(sid, "gpu", r.problem)  # why its GPU has no value (evidence)
            except Exception as e:
                session = Session(id=sid, user=srv.user, server=srv.name, gpus=0, started=now)
                sample, hold = Sample(t=now, gpu_util=None), self._session_error(sid, e, report)
            seen.sessions[sid] = Observed(srv, session, sample, pod, self.rules.applied(session))
            if hold is not None:
                seen.held[sid] = hold
            if session.gpus:
                report.gpu_sessions += 1
                util = sample.gpu_util
                if hold is None and self.kernels is not None and (session.gpu_shared or (
                        util is not None and len(util) == session.gpus
                        and all(u is not None and u < seen.sessions[sid].config.gpu_idle_threshold
                                for u in util))):
                    probe.append(sid)  # GPU-idle (or shared: kernels decide): a busy kernel matters

        on_error = partial(self._session_error, report=report)
        if probe:
            assert self.kernels is not None
            await probe_kernels(self.kernels, probe, seen, report, self.metrics, on_error)
        if self.arbiter is not None:
            await self.arbiter.arbitrate(seen, now)
        self._sessions_gone(set(seen.sessions), now)
        return seen

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

    def _error(self, report: CycleReport, e: SignalError) -> None:
        log.warning("signal %s failed: %s", e.source, e.message)
        self.metrics.signal_errors.labels(e.source).inc()
        report.errors[e.source] = e.message

    async def _pods(self, stale_s: float) -> PodSnapshot:
        assert self.pods is not None
        await self.pods.start()
        return self.pods.snapshot(stale_s)

    def _session_error(self, sid: str, e: Exception, report: CycleReport) -> Decision:
        """An unexpected error while observing or deciding one session: it is held, the
        error counted, and logged with its traceback once (until the session recovers)."""
        what = f"{type(e).__name__}: {brief(str(e))}"
        if self._failing.get(sid) != what:
            self._failing[sid] = what
            log.error("session %s held: unexpected %s", server_name(sid), what, exc_info=e)
        self.metrics.session_errors.inc()
        report.problem(sid, "session", what)
        return Decision(sid, "hold", "session-error",
                        f"an unexpected error while deciding ({what}); never reclaimed on it",
                        measured=Measured(problem=what))

    def _stopped(self, sid: str) -> None:
        """One of our stops completed: its history goes, and the pages stop showing it now,
        and after the cycle under way (which may have observed it still running)."""
        self.history.forget(sid)
        self.status.stopped(sid)
        self._stopped_since_observed.add(sid)

    def _sessions_gone(self, present: set[str], now: dt.datetime) -> None:
        """Sessions no longer ready: note them stopped; their open warnings end."""
        release = getattr(self.kernels, "release", None)  # the probe credential goes too
        stopping = set(self.stops.tasks)
        for sid in self._live - present - stopping:
            if release is not None:
                release(sid)
            self.history.forget(sid)
            self._last.pop(sid, None)
            self._failing.pop(sid, None)
            self.store.session_stopped(sid, now)
            self.store.close_episode(sid, t=now)
        self._live = present | stopping

    # ------------------------------------------------------------------ decide

    def _decide(self, seen: Observation, now: dt.datetime, report: CycleReport) -> Decisions:
        """Each session's decision (into the report), and what the act step does with them."""
        out = Decisions(intents=self.store.intents(),
                        exemptions=self.store.exemptions(now))  # set by admins on the web admin page
        for sid, o in seen.sessions.items():
            if sid not in seen.held and o.pod is not None and o.pod.keepalive_until is not None:
                try:
                    self._intent_from_spawn(sid, o.pod, out.intents, now)
                except Exception as e:
                    seen.held[sid] = self._session_error(sid, e, report)
        warnings = self.store.open_warnings()
        # The last cycle's status goes before the new decisions are made, so that the two are
        # not held at once (with 20,000 servers, 30 MiB each: the cycle's peak), and after the
        # store's reads (a store that cannot be read leaves it shown). Nothing reads it
        # meanwhile: no await until the new one is published (`_publish`).
        self.status = CycleStatus(t=self.status.t, skipped=self.status.skipped, gpu_capacity=self.status.gpu_capacity)
        for sid, o in seen.sessions.items():
            d = seen.held.get(sid)
            if d is None:
                try:
                    d = self._decide_session(o, out, warnings.get(sid, ()), seen.pods.pending_gpus, now, report)
                except Exception as e:
                    d = self._session_error(sid, e, report)
                else:
                    if o.session.gpus:
                        out.samples.append(SessionSample(sid, o.sample))
                        if (sid, o.session.started) not in self.history.recorded:
                            out.new_sessions.append(o.session)
            if seen.pods_as_of is not None and sid not in seen.held:  # decided with the last pod list
                d = replace(d, measured=replace(d.measured, pods_as_of=seen.pods_as_of))
            if d.action == "reclaim" and self.settings.dry_run and o.ran is not None:
                # what a real stop's record would have kept: the decisions log holds it
                d = replace(d, ran=o.ran)
            report.decisions[sid] = d
            if self._last.get(sid) != (d.action, d.rule):
                self._last[sid] = (d.action, d.rule)
                out.changed.append(d)
            if d.action == "warn":
                out.warns.append((o.session, d))
            elif d.action == "reclaim":
                out.reclaims.setdefault(o.session.user, []).append(Reclaim(
                    o.session, d, _episode(d, o.session), o.ran, (o.server.url, o.pod.direct_url if o.pod else None)))
        return out

    def _decide_session(self, o: Observed, decided: Decisions, warnings: tuple[Warning, ...],
                        pending_gpus: int, now: dt.datetime, report: CycleReport) -> Decision:
        """The policy's step for one session (`policy.step`), with its history, intent,
        warnings and exemption; the warnings of a finished idle episode are closed in the
        store (its own warning is recorded as it goes out, `_warn`)."""
        sid, session = o.session.id, o.session
        samples = self.history.add(session, o.sample, now, o.config)
        view = SessionView(session=session, samples=samples, intent=decided.intents.get(sid), warnings=warnings,
                           cull_arbiter=o.cull_arbiter)
        d = step(view, now=now, pending_gpus=pending_gpus, policy=o.policy,
                 exemption=decided.exemptions.get(sid)).decision
        problems = report.problems.get(sid, {})
        if d.rule == "kernel-data-missing" and "kernels" in problems:
            d = replace(d, measured=replace(d.measured, problem=problems["kernels"]))
        if d.rule == "gpu-data-missing" and "gpu" in problems:
            d = replace(d, measured=replace(d.measured, gpu_problem=problems["gpu"]))
        if d.cleared:
            self.store.close_episode(sid, [w.t for w in d.cleared], t=now)
        self._failing.pop(sid, None)
        return d

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
        log.info("intent of %s from the spawn form: keep until %s", server_name(sid), format_time(pod.keepalive_until))

    # ------------------------------------------------------------------ act

    async def _act(self, seen: Observation, decided: Decisions, now: dt.datetime, report: CycleReport) -> None:
        # a record that fails (the database, or rows of one session it refuses) is logged,
        # and the warnings and stops go all the same
        self._record(report, "decisions", self.store.record_decisions, decided.changed, now)
        self._publish(seen, decided, now, report)
        await asyncio.gather(*(self._warn(session, d, now, report) for session, d in decided.warns))
        self._set_state_metrics(seen, report, now)
        if decided.samples:
            refused = self._record(report, "observations", self.store.record_observations, now,
                                   decided.samples, seen.pods.pending_gpus, decided.new_sessions)
            if refused is not None:
                self.history.recorded.update((s.id, s.started) for s in decided.new_sessions if s.id not in refused)
        self._prune(now)

        for user, reclaims in decided.reclaims.items():
            try:
                begun, would = self.stops.reclaim(user, reclaims, seen.servers, now)
            except Exception:  # one user's stops must not keep the others' from starting
                log.exception("the reclaim of %s's servers failed", user)
            else:
                report.stops += begun
                report.would_reclaim += would
        if self.settings.cull_users and not self.settings.dry_run:
            await self._cull_inactive_users(now, report)

    def _record(self, report: CycleReport, what: str, write: Callable[..., object], *args: object) -> set[str] | None:
        """One of the cycle's records: the sessions whose rows the store refused (logged, in
        the report's errors), or None when it failed as a whole (logged, the cycle's error)."""
        try:
            write(*args)
        except RowsRefused as e:
            log.error("%s", e)
            for sid, why in e.refused.items():
                report.problem(sid, "store", why)
            return set(e.refused)
        except Exception as e:
            log.exception("recording the cycle's %s failed", what)
            report.error = f"{type(e).__name__}: {str(e)[:200]}"
            return None
        return set()

    def _publish(self, seen: Observation, decided: Decisions, now: dt.datetime, report: CycleReport) -> None:
        """The pages' status of this cycle (`status.py`)."""
        warnings = self.store.open_warnings()
        status = CycleStatus(t=now, sessions={sid: session_status(
            o.session, o.sample, report.decisions.get(sid), pod=o.pod, url=o.server.url,
            hub_last_activity=o.server.last_activity,
            history=self.history.of(sid) if o.session.gpus else [],
            warnings=warnings.get(sid, ()), intent=decided.intents.get(sid),
            exemption=decided.exemptions.get(sid), max_keepalive=self.policy.max_keepalive,
            stopping=sid in self.stops.tasks, idle_threshold=o.config.gpu_idle_threshold)
            for sid, o in seen.sessions.items()
            if sid not in self._stopped_since_observed}, gpu_capacity=seen.pods.gpu_capacity)
        due = [f for sid, info in status.sessions.items()
               if (f := freeing(info, seen.sessions[sid].session, now)) is not None]
        status.queue = expect_free(waiting_servers(seen.pods.by_session.values(), now), due)
        self.status = status

    def _set_state_metrics(self, seen: Observation, report: CycleReport, now: dt.datetime) -> None:
        """The sessions by state, the holds by reason, and the idle GPUs and their idle hours."""
        m = self.metrics
        counts: dict[tuple[str, str, str], int] = {}
        holds: dict[str, int] = {}
        idle_gpus, idle_hours = 0, 0.0
        for sid, o in seen.sessions.items():
            d, gpus = report.decisions[sid], o.session.gpus
            key = ("true" if gpus else "false", d.action, d.rule)
            counts[key] = counts.get(key, 0) + 1
            if d.action == "hold":
                holds[d.rule] = holds.get(d.rule, 0) + 1
            if gpus and d.rule in IDLE_RULES:
                idle_gpus += gpus
                if d.idle_since is not None:
                    idle_hours += gpus * max(0.0, (now - d.idle_since).total_seconds()) / 3600
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
            self.store.prune_observations(now - dt.timedelta(seconds=self.settings.observation_retention))
            self.store.prune_records(now - dt.timedelta(seconds=self.settings.record_retention))

    async def _warn(self, session: Session, d: Decision, now: dt.datetime, report: CycleReport) -> None:
        assert d.reclaim_at is not None
        warning = Warning(session=session.id, t=now, rule=d.rule, reclaim_at=d.reclaim_at)
        channels = [getattr(n, "name", type(n).__name__) for n in self.dispatcher.notifiers]
        try:
            # recorded first: a restart between the two never sends it twice
            if not self.store.record_warning(warning, _episode(d, session), channels):
                return
            report.warned.append(session.id)
            self.metrics.warnings.labels(d.rule).inc()
            log.info("warn %s (%s): %s", server_name(session.id), d.rule, d.reason)
            await self._notify(d, session, now)
        except Exception:  # one warning must not keep the others, or the reclaims, from going out
            log.exception("the warning of %s failed", server_name(session.id))

    async def _notify(self, d: Decision, session: Session, now: dt.datetime) -> None:
        url = self.settings.keepalive_url
        if url:  # the keep-alive page opens with this session selected
            url += ("&" if "?" in url else "?") + urlencode({"session": session.id})
        results = await self.dispatcher.notify(d, session, keepalive_url=url,
                                               hub_name=self.settings.hub_name, now=now)
        for name, ok in results.items():
            if not ok:
                self.metrics.notification_errors.labels(name).inc()

    async def _cull_inactive_users(self, now: dt.datetime, report: CycleReport) -> None:
        """--cull-users for users with no running server, as idle-culler does each cycle."""
        inactive = getattr(self.hub, "inactive_users", None)
        if inactive is not None:
            report.users_deleted += await self.stops.cull_inactive_users(await self._read("hub", inactive(), report)
                                                                         or [], now)
