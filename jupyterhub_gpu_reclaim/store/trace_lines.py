"""The observations of each cycle, in the trace format: sample and pressure lines, the
session line of each session instance, and the window of them a trace is made of
(`trace_export` writes it)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Iterable

import sqlalchemy as sa

from ..policy.observations import Sample, Session
from ..timestamps import utcnow
from ..replay.trace import Pressure, TraceSample, TraceSession, dump_record
from .base import StoreBase, rowcount
from .schema import DecisionRow, IntentRow, ObservationRow, TraceSessionRow, aware, unstorable


@dataclass(frozen=True)
class StoredIntent:
    session: str
    until: dt.datetime
    set_at: dt.datetime
    cleared_at: dt.datetime | None


@dataclass(frozen=True)
class StoredObservations:
    """The rows of a time window that a trace is made of (``Store.observations_between``)."""

    since: dt.datetime
    until: dt.datetime
    lines: list[tuple[dt.datetime, str, str | None, str]]  # (t, kind, session, line): samples, pressure; by t
    sessions: list[tuple[str, dt.datetime, dt.datetime | None, str]]  # (id, started, stopped, session line)
    intents: list[StoredIntent]  # set by the window's end and not cleared before its start



class ObservationStore(StoreBase):

    def record_observations(self, t: dt.datetime, samples: Iterable[tuple[str, Sample]],
                            pending_gpus: int | None, sessions: Iterable[Session] = ()) -> int:
        """Store one cycle: a ``sample`` line per (session id, sample), a ``pressure`` line
        (unless ``pending_gpus`` is None: unknown) and the ``session`` line of each session
        not yet recorded (pass the cycle's sessions; known ones cost one lookup). In one
        transaction unless a session's rows fail (`_insert_by_session`). Returns the number
        of observation rows written."""
        t = aware(t, "t")
        rows: dict[str | None, list] = {}
        for sid, s in samples:
            rows.setdefault(sid, []).append((ObservationRow, {
                "t": aware(s.t, "sample.t"), "kind": "sample", "session": sid,
                "line": dump_record(TraceSample(session=sid, sample=s))}))
        if pending_gpus is not None:
            rows.setdefault(None, []).append((ObservationRow, {
                "t": t, "kind": "pressure", "session": None,
                "line": dump_record(Pressure(t=t, pending_gpus=pending_gpus))}))
        by_key = {(s.id, aware(s.started, "started")): s for s in sessions if unstorable(s.id) is None}
        if by_key:  # one query for which are known, not one per session
            ids = sorted({sid for sid, _ in by_key})
            known: set[tuple[str, dt.datetime]] = set()
            with self._session() as db:
                for chunk in range(0, len(ids), 500):
                    known.update(db.execute(sa.select(TraceSessionRow.session, TraceSessionRow.started)
                                            .where(TraceSessionRow.session.in_(ids[chunk:chunk + 500]))).all())
            for (sid, started), session in by_key.items():
                if (sid, started) not in known:
                    rows.setdefault(sid, []).append((TraceSessionRow, {
                        "session": sid, "started": started, "stopped": None,
                        "line": dump_record(TraceSession(session=session))}))
        if rows:
            self._insert_by_session("observations", rows)
        return sum(model is ObservationRow for group in rows.values() for model, _ in group)

    def session_stopped(self, session: str, t: dt.datetime) -> bool:
        """Note that the session's latest recorded instance stopped at ``t`` (trace ``stopped``)."""
        t = aware(t, "t")
        if unstorable(session) is not None:
            return False  # never recorded
        with self._session.begin() as db:
            row = db.scalars(sa.select(TraceSessionRow)
                             .where(TraceSessionRow.session == session, TraceSessionRow.stopped.is_(None))
                             .order_by(TraceSessionRow.started.desc()).limit(1)).first()
            if row is None:
                return False
            row.stopped = max(t, row.started)
            return True

    def observations_between(self, since: dt.datetime | None = None, until: dt.datetime | None = None, *,
                             intents: bool = True) -> StoredObservations:
        """What the store holds of [since, until] for a trace (``trace_export`` writes it):
        ``since`` defaults to the earliest observation, ``until`` to now."""
        now = utcnow()
        with self._session() as db:
            if since is None:
                since = db.scalar(sa.select(sa.func.min(ObservationRow.t))) or now
            since = aware(since, "since")
            until = aware(until, "until") if until is not None else max(now, since)
            if until < since:
                raise ValueError("until is before since")
            lines = db.execute(sa.select(ObservationRow.t, ObservationRow.kind, ObservationRow.session,
                                         ObservationRow.line)
                               .where(ObservationRow.t >= since, ObservationRow.t <= until)
                               .order_by(ObservationRow.t, ObservationRow.id)).all()
            sessions = db.execute(sa.select(TraceSessionRow.session, TraceSessionRow.started,
                                            TraceSessionRow.stopped, TraceSessionRow.line)
                                  .where(TraceSessionRow.started <= until)).all()
            # intents set in the window, or earlier and still current at its start
            rows = db.scalars(sa.select(IntentRow).where(
                IntentRow.set_at <= until,
                sa.or_(IntentRow.cleared_at.is_(None), IntentRow.cleared_at >= since))
            ).all() if intents else []
        return StoredObservations(
            since=since, until=until, lines=[(t, kind, sid, line) for t, kind, sid, line in lines],
            sessions=[(sid, started, stopped, line) for sid, started, stopped, line in sessions],
            intents=[StoredIntent(r.session, r.until, r.set_at, r.cleared_at) for r in rows])

    def gpu_sessions_between(self, since: dt.datetime,
                             until: dt.datetime) -> list[tuple[str, dt.datetime, dt.datetime | None, int]]:
        """(session, started, stopped or None, GPUs) of each recorded instance with GPUs that
        ran at some time in [since, until], by start."""
        since, until = aware(since, "since"), aware(until, "until")
        with self._session() as db:
            rows = db.execute(sa.select(TraceSessionRow.session, TraceSessionRow.started, TraceSessionRow.stopped,
                                        TraceSessionRow.line)
                              .where(TraceSessionRow.started <= until,
                                     sa.or_(TraceSessionRow.stopped.is_(None), TraceSessionRow.stopped >= since))
                              .order_by(TraceSessionRow.started)).all()
        out = [(sid, started, stopped, int(json.loads(line).get("gpus") or 0)) for sid, started, stopped, line in rows]
        return [row for row in out if row[3] > 0]

    def pressure_between(self, since: dt.datetime, until: dt.datetime) -> list[tuple[dt.datetime, int]]:
        """(t, GPUs requested by pods waiting for one) of each cycle in [since, until]."""
        since, until = aware(since, "since"), aware(until, "until")
        with self._session() as db:
            rows = db.execute(sa.select(ObservationRow.t, ObservationRow.line)
                              .where(ObservationRow.kind == "pressure", ObservationRow.t >= since,
                                     ObservationRow.t <= until)
                              .order_by(ObservationRow.t, ObservationRow.id)).all()
        return [(t, int(json.loads(line)["pending_gpus"])) for t, line in rows]

    def prune_observations(self, older_than: dt.datetime) -> int:
        """Delete observations and decisions before ``older_than`` (the retention setting),
        and session lines of instances that stopped before it. Returns the observation rows
        deleted. Intents, warnings and reclaims are kept (see :meth:`prune_records`)."""
        older_than = aware(older_than, "older_than")
        with self._session.begin() as db:
            n = rowcount(db.execute(sa.delete(ObservationRow).where(ObservationRow.t < older_than)))
            db.execute(sa.delete(DecisionRow).where(DecisionRow.t < older_than))
            db.execute(sa.delete(TraceSessionRow).where(TraceSessionRow.stopped < older_than))
        return n
