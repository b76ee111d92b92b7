"""The observations of each cycle, in typed rows: each session's samples, the cycle's
pressure, each session instance the cycle met, and the window of them a replay is made of
(`StoredObservations`: `replay.trace_export` makes a trace of it, `service.sample_history` the
samples the policy decides on after a restart)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Union

import sqlalchemy as sa

from ..policy.observations import IntentChange, Pressure, Sample, Session, SessionInstance, SessionSample
from ..timestamps import utcnow
from .engine import StoreBase, rowcount
from .schema import DecisionRow, IntentRow, ObservationRow, SessionRow, aware, unstorable


@dataclass(frozen=True)
class StoredIntent:
    session: str
    until: dt.datetime
    set_at: dt.datetime
    cleared_at: dt.datetime | None


Event = Union[SessionInstance, SessionSample, Pressure, IntentChange]


@dataclass(frozen=True)
class StoredObservations:
    """The rows of a time window a replay is made of (``Store.observations_between``)."""

    since: dt.datetime
    until: dt.datetime
    observations: list[SessionSample | Pressure]  # by time, in the order written
    sessions: list[SessionInstance]  # the instances started by the window's end
    intents: list[StoredIntent]  # set by the window's end and not cleared before its start

    def timeline(self, extra: Iterable[SessionInstance] = ()) -> Iterator[Event]:
        """The window in time order: each instance that ran in it (``extra``: ones never
        recorded) at its start, before the samples of the same time (an id used again: the
        earlier instance stopped at the latest when the next started); the samples of the
        instance current at their time (others, and those recorded against another
        instance's GPU count, are left out); the pressure; the intent changes of the
        current instances' sessions."""
        instances = {(s.session.id, s.session.started): s for s in self.sessions}
        for s in extra:
            if s.session.started.tzinfo is None:
                raise ValueError(f"started: naive datetime {s.session.started.isoformat()}: give aware UTC times")
            instances.setdefault((s.session.id, s.session.started.astimezone(dt.timezone.utc)), s)
        by_id: dict[str, list[dt.datetime]] = {}
        for sid, started in instances:
            by_id.setdefault(sid, []).append(started)
        events: list[tuple[dt.datetime, int, int, Event]] = []  # (t, 0 instance / 1 other, seq, event)
        for sid, starts in by_id.items():
            starts.sort()
            for i, started in enumerate(starts):
                instance = instances[(sid, started)]
                stopped = instance.stopped
                if i + 1 < len(starts) and (stopped is None or stopped > starts[i + 1]):
                    stopped = starts[i + 1]
                if stopped is not None and stopped < self.since:
                    continue
                events.append((started, 0, len(events), SessionInstance(instance.session, stopped)))
        for o in self.observations:
            events.append((o.t, 1, len(events), o))
        for r in self.intents:
            if r.set_at <= self.until:  # before since too (its instance may start before since)
                events.append((r.set_at, 1, len(events), IntentChange(r.set_at, r.session, r.until)))
            if r.cleared_at is not None and self.since <= r.cleared_at <= self.until:
                events.append((r.cleared_at, 1, len(events), IntentChange(r.cleared_at, r.session, None)))
        events.sort(key=lambda e: e[:3])
        current: dict[str, int] = {}  # session id → GPUs of its instance met last
        for _t, _order, _seq, event in events:
            if isinstance(event, SessionInstance):
                current[event.session.id] = event.session.gpus
            elif isinstance(event, Pressure):
                pass
            elif event.session not in current:
                continue  # not an instance of the window's
            elif isinstance(event, SessionSample) and not _fits(event.sample, current[event.session]):
                continue
            yield event


def _fits(sample: Sample, gpus: int) -> bool:
    """Whether the sample has one value per GPU of an instance with ``gpus``."""
    return all(values is None or len(values) == gpus for values in (sample.gpu_util, sample.gpu_mem_used_mib))


class ObservationStore(StoreBase):

    def record_observations(self, t: dt.datetime, samples: Iterable[SessionSample],
                            pending_gpus: int | None, sessions: Iterable[Session] = ()) -> int:
        """Store one cycle: a ``sample`` row per session sample, a ``pressure`` row
        (unless ``pending_gpus`` is None: unknown) and a row of each session instance not
        yet recorded (pass the cycle's sessions; known ones cost one lookup). In one
        transaction unless a session's rows fail (`_insert_by_session`). Returns the number
        of observation rows written."""
        t = aware(t, "t")
        rows: dict[str | None, list] = {}
        for ss in samples:
            sid, s = ss.session, ss.sample
            rows.setdefault(sid, []).append((ObservationRow, {
                "t": aware(s.t, "sample.t"), "kind": "sample", "session": sid, "gpu_util": s.gpu_util,
                "gpu_mem_used_mib": s.gpu_mem_used_mib, "kernels": s.kernels, "terminals": s.terminals,
                "hub_last_activity": s.hub_last_activity, "pending_gpus": None}))
        if pending_gpus is not None:
            rows.setdefault(None, []).append((ObservationRow, {
                "t": t, "kind": "pressure", "session": None, "gpu_util": None, "gpu_mem_used_mib": None,
                "kernels": None, "terminals": None, "hub_last_activity": None, "pending_gpus": pending_gpus}))
        by_key = {(s.id, aware(s.started, "started")): s for s in sessions if unstorable(s.id) is None}
        if by_key:  # one query for which are known, not one per session
            ids = sorted({sid for sid, _ in by_key})
            known: set[tuple[str, dt.datetime]] = set()
            with self._session() as db:
                for chunk in range(0, len(ids), 500):
                    known.update(db.execute(sa.select(SessionRow.session, SessionRow.started)
                                            .where(SessionRow.session.in_(ids[chunk:chunk + 500]))).all())
            for (sid, started), session in by_key.items():
                if (sid, started) not in known:
                    rows.setdefault(sid, []).append((SessionRow, _session_row(session, started)))
        if rows:
            self._insert_by_session("observations", rows)
        return sum(model is ObservationRow for group in rows.values() for model, _ in group)

    def session_stopped(self, session: str, t: dt.datetime) -> bool:
        """Note that the session's latest recorded instance stopped at ``t``."""
        t = aware(t, "t")
        if unstorable(session) is not None:
            return False  # never recorded
        with self._session.begin() as db:
            row = db.scalars(sa.select(SessionRow)
                             .where(SessionRow.session == session, SessionRow.stopped.is_(None))
                             .order_by(SessionRow.started.desc()).limit(1)).first()
            if row is None:
                return False
            row.stopped = max(t, row.started)
            return True

    def observations_between(self, since: dt.datetime | None = None, until: dt.datetime | None = None, *,
                             intents: bool = True) -> StoredObservations:
        """What the store holds of [since, until] for a replay: ``since`` defaults to the
        earliest observation, ``until`` to now."""
        now = utcnow()
        with self._session() as db:
            if since is None:
                since = db.scalar(sa.select(sa.func.min(ObservationRow.t))) or now
            since = aware(since, "since")
            until = aware(until, "until") if until is not None else max(now, since)
            if until < since:
                raise ValueError("until is before since")
            o = ObservationRow
            rows = db.execute(sa.select(o.t, o.kind, o.session, o.gpu_util, o.gpu_mem_used_mib, o.kernels,
                                        o.terminals, o.hub_last_activity, o.pending_gpus)
                              .where(o.t >= since, o.t <= until).order_by(o.t, o.id)).all()
            sessions = db.scalars(sa.select(SessionRow).where(SessionRow.started <= until)).all()
            # intents set in the window, or earlier and still current at its start
            intent_rows = db.scalars(sa.select(IntentRow).where(
                IntentRow.set_at <= until,
                sa.or_(IntentRow.cleared_at.is_(None), IntentRow.cleared_at >= since))
            ).all() if intents else []
        return StoredObservations(
            since=since, until=until, observations=[_observation(row) for row in rows],
            sessions=[SessionInstance(_session(r), r.stopped) for r in sessions],
            intents=[StoredIntent(r.session, r.until, r.set_at, r.cleared_at) for r in intent_rows])

    def gpu_instances_between(self, since: dt.datetime, until: dt.datetime) -> list[SessionInstance]:
        """Each recorded instance with GPUs that ran at some time in [since, until], by start."""
        since, until = aware(since, "since"), aware(until, "until")
        with self._session() as db:
            rows = db.scalars(sa.select(SessionRow)
                              .where(SessionRow.gpus > 0, SessionRow.started <= until,
                                     sa.or_(SessionRow.stopped.is_(None), SessionRow.stopped >= since))
                              .order_by(SessionRow.started)).all()
        return [SessionInstance(_session(r), r.stopped) for r in rows]

    def gpu_util_by_session(self, since: dt.datetime, until: dt.datetime
                            ) -> Iterator[tuple[str, list[dt.datetime], list[tuple[float | None, ...] | None]]]:
        """Each session's samples in [since, until]: (session, their times, their utilization
        per GPU), one session at a time (the usage report's reading of the record: a month
        of a large hub's samples is never in memory at once), in time order."""
        since, until = aware(since, "since"), aware(until, "until")
        o = ObservationRow
        query = (sa.select(o.session, o.t, o.gpu_util).where(o.kind == "sample", o.t >= since, o.t <= until)
                 .order_by(o.session, o.t, o.id).execution_options(yield_per=5000))
        with self._session() as db:
            current: str | None = None
            times: list[dt.datetime] = []
            utils: list[tuple[float | None, ...] | None] = []
            for sid, t, util in db.execute(query):
                if sid != current:
                    if current is not None:
                        yield current, times, utils
                    current, times, utils = sid, [], []
                times.append(t)
                utils.append(util)
            if current is not None:
                yield current, times, utils

    def first_observation(self) -> dt.datetime | None:
        """When the oldest observation the store holds was made (None: none yet)."""
        with self._session() as db:
            return db.scalar(sa.select(sa.func.min(ObservationRow.t)))

    def pressure_between(self, since: dt.datetime, until: dt.datetime) -> list[Pressure]:
        """The pressure (GPUs requested by pods waiting for one) of each cycle in [since, until]."""
        since, until = aware(since, "since"), aware(until, "until")
        with self._session() as db:
            rows = db.execute(sa.select(ObservationRow.t, ObservationRow.pending_gpus)
                              .where(ObservationRow.kind == "pressure", ObservationRow.t >= since,
                                     ObservationRow.t <= until)
                              .order_by(ObservationRow.t, ObservationRow.id)).all()
        return [Pressure(t, int(pending or 0)) for t, pending in rows]

    def prune_observations(self, older_than: dt.datetime) -> int:
        """Delete observations and decisions before ``older_than`` (the retention setting),
        and the instances that stopped before it. Returns the observation rows deleted.
        Intents, warnings and reclaims are kept (see :meth:`prune_records`)."""
        older_than = aware(older_than, "older_than")
        with self._session.begin() as db:
            n = rowcount(db.execute(sa.delete(ObservationRow).where(ObservationRow.t < older_than)))
            db.execute(sa.delete(DecisionRow).where(DecisionRow.t < older_than))
            db.execute(sa.delete(SessionRow).where(SessionRow.stopped < older_than))
        return n


def _session_row(s: Session, started: dt.datetime) -> dict[str, Any]:
    return {"session": s.id, "started": started, "stopped": None, "user": s.user, "server": s.server,
            "gpus": s.gpus, "admin": s.admin, "profile": s.profile, "groups": s.groups,
            "gpu_type": s.gpu_type, "gpu_shared": s.gpu_shared}


def _session(r: SessionRow) -> Session:
    return Session(id=r.session, user=r.user, server=r.server, gpus=r.gpus, started=r.started, admin=r.admin,
                   profile=r.profile, groups=r.groups, gpu_type=r.gpu_type, gpu_shared=r.gpu_shared)


def _observation(row: Any) -> SessionSample | Pressure:
    t = row[0]  # (a Row's .t is its tuple)
    if row.kind == "pressure":
        return Pressure(t, int(row.pending_gpus or 0))
    return SessionSample(row.session, Sample(t=t, gpu_util=row.gpu_util, gpu_mem_used_mib=row.gpu_mem_used_mib,
                                             kernels=row.kernels, terminals=row.terminals,
                                             hub_last_activity=row.hub_last_activity))
