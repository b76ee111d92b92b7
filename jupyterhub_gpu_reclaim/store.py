"""The reclaimer's store: intents, warnings, reclaim records (with their evidence and stuck
stops), the observations of each cycle (in the trace format) and, optionally, the
decisions log. A restart loses no intent or warning, and the store refuses a second warning
or a second stop for the same episode.

SQLAlchemy 2, synchronous. ``Store.open(url)`` takes any SQLAlchemy URL (``sqlite:///...``
by default; ``postgresql+psycopg://...`` with that driver installed) or a plain file path,
which means a SQLite file. Every method is one short transaction; from asyncio call it
through ``await asyncio.to_thread(store.method, ...)`` so the event loop never waits on the
database. The engine's pool makes that safe (each call takes its own connection).

Times go in and come out as timezone-aware UTC datetimes. They are stored as naive UTC
(SQLite keeps no offset); a naive datetime passed in is refused with ValueError. Evidence
dicts are stored as JSON: datetimes in them come back as RFC 3339 strings, tuples as lists.

Schema versions: the ``schema_version`` table holds one row. Version 1 is the first;
version 2 added the web pages' exemptions and audit log; version 3 keeps one intent row
per session (a new intent replaces it, a clear marks it).
``MIGRATIONS[i]`` is a function ``(connection) -> None`` that upgrades a store from version
``i + 1`` to ``i + 2``; the current version is ``len(MIGRATIONS) + 1`` and the ORM models
below always describe the current schema. A new database gets the current tables directly;
an older one is upgraded step by step (each step in its own transaction, the version row
updated with it); a newer one (written by a later release) is refused with
:class:`StoreVersionError`.

Episodes: the caller names an episode (for example ``"alice/@2026-11-02T10:00:00Z"``: the
session id and the start of its idle spell). ``record_warning`` is idempotent per
(session, rule, episode); ``begin_reclaim`` allows one reclaim per (session, episode) and
none while another reclaim of the session is unfinished (begun, or stuck).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, get_args

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from .observations import Decision, Intent, Outcome, Sample, Session, Warning
from .timestamps import format_time, utcnow
from .trace import Pressure, TraceSample, TraceSession, dump_record

__all__ = [
    "DEFAULT_URL",
    "MIGRATIONS",
    "StoreError",
    "StoreVersionError",
    "ReclaimRecord",
    "Store",
    "StoredIntent",
    "StoredObservations",
    "current_version",
]

DEFAULT_URL = "sqlite:///gpu_reclaim.sqlite"
UTC = dt.timezone.utc
OUTCOMES = get_args(Outcome)

# MIGRATIONS[i] upgrades version i + 1 to version i + 2. Append, never edit or reorder.
MIGRATIONS: list[Callable[[Connection], None]] = []  # filled below the models


def current_version() -> int:
    return len(MIGRATIONS) + 1


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says which store and why."""


class StoreVersionError(StoreError):
    """The database's schema version is not one this release can read."""


# --------------------------------------------------------------------------- column types


class UTCDateTime(sa.types.TypeDecorator):
    """Aware datetime in and out, naive UTC in the database."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        if not isinstance(value, dt.datetime):
            raise ValueError(f"expected a datetime, not {value!r}")
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: the store takes aware UTC times")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return format_time(value) if value.tzinfo else value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot store {type(value).__name__} as JSON: {value!r}")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, separators=(",", ":"), sort_keys=True)


# --------------------------------------------------------------------------- schema


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    __tablename__ = "schema_version"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int]


class _UntilRow:
    """A session kept until a time, set by someone, until cleared: intents and exemptions."""

    id: Mapped[int] = mapped_column(primary_key=True)
    session: Mapped[str] = mapped_column(sa.String(255), index=True)
    until: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    set_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    by: Mapped[str] = mapped_column(sa.String(255), default="")
    cleared_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, index=True)


class IntentRow(_UntilRow, Base):
    """Schema v3: one row per session, its latest intent (replaced by the next, marked
    cleared by a clear): what a user writes never grows the table."""

    __tablename__ = "intents"
    __table_args__ = (sa.Index("uq_intents_session", "session", unique=True),)
    session: Mapped[str] = mapped_column(sa.String(255))


class WarningRow(Base):
    __tablename__ = "warnings"
    __table_args__ = (sa.UniqueConstraint("session", "rule", "episode", name="uq_warning_episode"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    session: Mapped[str] = mapped_column(sa.String(255), index=True)
    rule: Mapped[str] = mapped_column(sa.String(64))
    episode: Mapped[str] = mapped_column(sa.String(255))
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    reclaim_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    channels: Mapped[str] = mapped_column(sa.Text, default="[]")  # JSON list
    cleared_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class ReclaimRow(Base):
    __tablename__ = "reclaims"
    __table_args__ = (sa.UniqueConstraint("session", "episode", name="uq_reclaim_episode"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    session: Mapped[str] = mapped_column(sa.String(255), index=True)
    episode: Mapped[str] = mapped_column(sa.String(255))
    rule: Mapped[str] = mapped_column(sa.String(64))
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    gpus: Mapped[int]
    evidence: Mapped[str] = mapped_column(sa.Text, default="{}")  # JSON object
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), index=True)
    detail: Mapped[str] = mapped_column(sa.Text, default="")


class TraceSessionRow(Base):
    __tablename__ = "trace_sessions"
    session: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    started: Mapped[dt.datetime] = mapped_column(UTCDateTime, primary_key=True)
    stopped: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    line: Mapped[str] = mapped_column(sa.Text)  # the session line, stopped left null


class ObservationRow(Base):
    __tablename__ = "observations"
    id: Mapped[int] = mapped_column(primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))  # "sample" | "pressure"
    session: Mapped[str | None] = mapped_column(sa.String(255))
    line: Mapped[str] = mapped_column(sa.Text)  # one trace line


class DecisionRow(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    session: Mapped[str] = mapped_column(sa.String(255), index=True)
    action: Mapped[str] = mapped_column(sa.String(16))
    rule: Mapped[str] = mapped_column(sa.String(64))
    reason: Mapped[str] = mapped_column(sa.Text)
    reclaim_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    evidence: Mapped[str] = mapped_column(sa.Text, default="{}")


class ExemptionRow(_UntilRow, Base):
    """Schema v2: an admin's "exempt this session for N hours" (the web admin page)."""

    __tablename__ = "exemptions"


class AuditRow(Base):
    """Schema v2: what users and admins did through the web pages and API, and who."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    actor: Mapped[str] = mapped_column(sa.String(255))
    action: Mapped[str] = mapped_column(sa.String(64))
    session: Mapped[str] = mapped_column(sa.String(255), default="")
    detail: Mapped[str] = mapped_column(sa.Text, default="{}")  # JSON object


def _v1_to_v2(conn: Connection) -> None:
    """v1 → v2: the exemptions and audit tables (web admin actions)."""
    Base.metadata.create_all(conn, tables=[ExemptionRow.__table__, AuditRow.__table__])  # type: ignore[list-item]


MIGRATIONS.append(_v1_to_v2)


def _v2_to_v3(conn: Connection) -> None:
    """v2 → v3: one intent row per session. Every set added a row; keep each session's
    latest (the current intent if it has one: a set cleared all others), then make the
    session unique."""
    t = IntentRow.__table__
    latest = sa.select(sa.func.max(t.c.id)).group_by(t.c.session).scalar_subquery()
    conn.execute(sa.delete(t).where(t.c.id.not_in(latest)))
    conn.execute(sa.text("DROP INDEX IF EXISTS ix_intents_session"))
    next(i for i in t.indexes if i.name == "uq_intents_session").create(conn, checkfirst=True)


MIGRATIONS.append(_v2_to_v3)

_OUR_TABLES = {t for t in Base.metadata.tables if t != "schema_version"}


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ReclaimRecord:
    id: int
    session: str
    episode: str
    rule: str
    t: dt.datetime
    gpus: int
    evidence: dict[str, Any]
    finished_at: dt.datetime | None
    outcome: str | None  # None: begun, not finished (e.g. the service died mid-stop)
    detail: str


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


def _reclaim(row: ReclaimRow) -> ReclaimRecord:
    return ReclaimRecord(id=row.id, session=row.session, episode=row.episode, rule=row.rule, t=row.t,
                         gpus=row.gpus, evidence=json.loads(row.evidence), finished_at=row.finished_at,
                         outcome=row.outcome, detail=row.detail)


def _audit(row: AuditRow) -> dict[str, Any]:
    return {"t": row.t, "actor": row.actor, "action": row.action, "session": row.session,
            "detail": json.loads(row.detail)}


def _aware(value: dt.datetime, name: str) -> dt.datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name}: naive datetime {value.isoformat()}: the store takes aware UTC times")
    return value.astimezone(UTC)


def _make_url(url: str | os.PathLike) -> sa.URL:
    text = os.fspath(url)
    if "://" not in text:  # a plain path: a SQLite file
        return sa.URL.create("sqlite", database=os.path.abspath(text))
    try:
        return sa.make_url(text)
    except sa_exc.ArgumentError as e:
        raise StoreError(f"store URL {text!r} is not a SQLAlchemy URL: {e}") from None


# --------------------------------------------------------------------------- the store


class Store:
    """Open with :meth:`open`; close with :meth:`close` (or use it as a context manager)."""

    def __init__(self, engine: Engine, name: str):
        self.engine = engine
        self.name = name
        self._session = sessionmaker(engine, expire_on_commit=False)

    # ---- opening, versions

    @classmethod
    def open(cls, url: str | os.PathLike = DEFAULT_URL, **engine_kwargs: Any) -> "Store":
        """Open (creating or upgrading) the store at ``url``. Raises :class:`StoreError` with
        the URL (password hidden) and the reason when that fails."""
        parsed = _make_url(url)
        name = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            engine_kwargs.setdefault("connect_args", {}).setdefault("timeout", 30)
            engine_kwargs["connect_args"].setdefault("check_same_thread", False)
        try:
            engine = sa.create_engine(parsed, **engine_kwargs)
        except sa_exc.NoSuchModuleError as e:
            raise StoreError(f"store {name}: unknown database kind {parsed.drivername!r} ({e})") from None
        except ImportError as e:
            raise StoreError(f"store {name}: the database driver is not installed ({e})") from None
        except sa_exc.ArgumentError as e:
            raise StoreError(f"store {name}: bad URL ({e})") from None
        if parsed.get_backend_name() == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        store = cls(engine, name)
        try:
            store._prepare()
        except StoreError:
            engine.dispose()
            raise
        except sa_exc.SQLAlchemyError as e:
            engine.dispose()
            reason = getattr(e, "orig", None) or e
            raise StoreError(f"store {name}: cannot open the database: {reason}") from None
        return store

    def _prepare(self) -> None:
        target = current_version()
        with self.engine.begin() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            if "schema_version" not in tables:
                ours = sorted(tables & _OUR_TABLES)
                if ours:
                    raise StoreError(
                        f"store {self.name}: the database has tables {', '.join(ours)} but no "
                        "schema_version table: it is not a gpu-reclaim store (or a damaged one)")
                Base.metadata.create_all(conn)
                conn.execute(sa.insert(SchemaVersion).values(id=1, version=target))
                return
            version = conn.execute(sa.select(SchemaVersion.version).where(SchemaVersion.id == 1)).scalar()
        if version is None:
            raise StoreError(f"store {self.name}: the schema_version table is empty")
        if version > target:
            raise StoreVersionError(
                f"store {self.name} has schema version {version}, newer than this release of "
                f"jupyterhub-gpu-reclaim reads (up to {target}): it was written by a later "
                "release; upgrade jupyterhub-gpu-reclaim or use another database")
        if version < 1:
            raise StoreVersionError(f"store {self.name} has invalid schema version {version}")
        while version < target:
            with self.engine.begin() as conn:
                MIGRATIONS[version - 1](conn)
                version += 1
                conn.execute(sa.update(SchemaVersion).where(SchemaVersion.id == 1).values(version=version))

    def schema_version(self) -> int:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(SchemaVersion.version).where(SchemaVersion.id == 1)).scalar_one()

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Store {self.name}>"

    # ---- intents

    def set_intent(self, session: str, until: dt.datetime, set_at: dt.datetime, by: str = "") -> Intent:
        """Record "keep alive until ``until``", replacing the session's intent (its one row).
        Capping ``until`` at ``max_keepalive`` is the caller's job."""
        until, set_at = _aware(until, "until"), _aware(set_at, "set_at")
        values = {"until": until, "set_at": set_at, "by": by, "cleared_at": None}
        for attempt in (1, 2):
            try:
                with self._session.begin() as db:
                    row = db.scalar(sa.select(IntentRow).where(IntentRow.session == session))
                    if row is None:
                        db.add(IntentRow(session=session, **values))
                    else:
                        for key, value in values.items():
                            setattr(row, key, value)
                break
            except sa_exc.IntegrityError:  # another writer added the row first: replace it
                if attempt == 2:
                    raise
        return Intent(session=session, until=until, set_at=set_at)

    def clear_intent(self, session: str, t: dt.datetime) -> bool:
        """Clear the session's current intent at ``t``; False if it had none."""
        t = _aware(t, "t")
        with self._session.begin() as db:
            result = db.execute(sa.update(IntentRow)
                                .where(IntentRow.session == session, IntentRow.cleared_at.is_(None))
                                .values(cleared_at=t))
            return result.rowcount > 0

    def intents(self) -> dict[str, Intent]:
        """The current (not cleared) intent of each session, expired ones included: the
        policy applies ``until``."""
        with self._session() as db:
            rows = db.scalars(sa.select(IntentRow).where(IntentRow.cleared_at.is_(None))
                              .order_by(IntentRow.set_at, IntentRow.id))
            return {r.session: Intent(session=r.session, until=r.until, set_at=r.set_at) for r in rows}

    def intent_changed_at(self, session: str) -> dt.datetime | None:
        """When the session's intent was last set or cleared; None if it never had one (or
        the retention pruned it). A cleared intent is remembered: see ``service._intent_from_spawn``."""
        with self._session() as db:
            row = db.execute(sa.select(IntentRow.set_at, IntentRow.cleared_at)
                             .where(IntentRow.session == session)).first()
        return None if row is None else row.cleared_at or row.set_at

    # ---- warnings

    def record_warning(self, warning: Warning, episode: str, channels: Sequence[str] = ()) -> bool:
        """Record a warning before sending it. False (and nothing written) when this
        (session, rule, episode) was already warned: do not send it again."""
        t, reclaim_at = _aware(warning.t, "t"), _aware(warning.reclaim_at, "reclaim_at")
        try:
            with self._session.begin() as db:
                exists = db.scalar(sa.select(WarningRow.id).where(
                    WarningRow.session == warning.session, WarningRow.rule == warning.rule,
                    WarningRow.episode == episode))
                if exists is not None:
                    return False
                db.add(WarningRow(session=warning.session, rule=warning.rule, episode=episode, t=t,
                                  reclaim_at=reclaim_at, channels=_dumps(list(channels))))
        except sa_exc.IntegrityError:  # a concurrent writer got there first
            return False
        return True

    def warnings_for(self, session: str) -> tuple[Warning, ...]:
        """The session's warnings not yet cleared (its open episode), oldest first."""
        with self._session() as db:
            rows = db.scalars(sa.select(WarningRow)
                              .where(WarningRow.session == session, WarningRow.cleared_at.is_(None))
                              .order_by(WarningRow.t, WarningRow.id))
            return tuple(Warning(session=r.session, t=r.t, rule=r.rule, reclaim_at=r.reclaim_at) for r in rows)

    def open_warnings(self) -> dict[str, tuple[Warning, ...]]:
        """``warnings_for`` of every session that has open warnings (one query, for a cycle)."""
        out: dict[str, list[Warning]] = {}
        with self._session() as db:
            rows = db.scalars(sa.select(WarningRow).where(WarningRow.cleared_at.is_(None))
                              .order_by(WarningRow.t, WarningRow.id))
            for r in rows:
                out.setdefault(r.session, []).append(
                    Warning(session=r.session, t=r.t, rule=r.rule, reclaim_at=r.reclaim_at))
        return {k: tuple(v) for k, v in out.items()}

    def close_episode(self, session: str, warned_ats: Iterable[dt.datetime] | None = None,
                      *, t: dt.datetime | None = None) -> int:
        """Mark the session's open warnings sent at ``warned_ats`` (all open ones when None)
        cleared at ``t`` (default now). Returns how many were cleared. A cleared episode
        stays recorded: the same (session, rule, episode) is still never warned again."""
        t = _aware(t, "t") if t is not None else utcnow()
        query = sa.update(WarningRow).where(WarningRow.session == session, WarningRow.cleared_at.is_(None))
        if warned_ats is not None:
            ats = [_aware(a, "warned_ats") for a in warned_ats]
            if not ats:
                return 0
            query = query.where(WarningRow.t.in_(ats))
        with self._session.begin() as db:
            return db.execute(query.values(cleared_at=t)).rowcount

    # ---- reclaims

    def begin_reclaim(self, session: str, rule: str, t: dt.datetime, evidence: dict[str, Any],
                      gpus: int, *, episode: str | None = None) -> int | None:
        """Record a reclaim before stopping the server; returns its id, or None when it must
        not be stopped: a reclaim of this (session, episode) is already recorded, or another
        reclaim of the session is unfinished (begun or stuck). ``episode`` defaults to the
        episode of the session's latest open warning, else to ``rule@t`` (which guards only
        against concurrent stops)."""
        t = _aware(t, "t")
        try:
            with self._session.begin() as db:
                if episode is None:
                    episode = db.scalar(sa.select(WarningRow.episode)
                                        .where(WarningRow.session == session, WarningRow.cleared_at.is_(None))
                                        .order_by(WarningRow.t.desc(), WarningRow.id.desc()).limit(1))
                    if episode is None:
                        episode = f"{rule}@{format_time(t)}"
                blocked = db.scalar(sa.select(ReclaimRow.id).where(
                    ReclaimRow.session == session,
                    sa.or_(ReclaimRow.episode == episode, ReclaimRow.outcome.is_(None),
                           ReclaimRow.outcome == "stuck")).limit(1))
                if blocked is not None:
                    return None
                row = ReclaimRow(session=session, episode=episode, rule=rule, t=t, gpus=gpus,
                                 evidence=_dumps(dict(evidence)))
                db.add(row)
                db.flush()
                return row.id
        except sa_exc.IntegrityError:
            return None

    def finish_reclaim(self, reclaim_id: int, t: dt.datetime, outcome: Outcome, detail: str = "") -> None:
        """Record how the stop ended: "stopped" (also for a server found "already-stopped":
        it is down either way), "stuck" or "failed". A "stuck" reclaim may be finished again
        later (the retry stopped it: "stopped")."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        t = _aware(t, "t")
        with self._session.begin() as db:
            row = db.get(ReclaimRow, reclaim_id)
            if row is None:
                raise KeyError(f"no reclaim with id {reclaim_id}")
            row.finished_at, row.detail = t, detail
            row.outcome = "stopped" if outcome == "already-stopped" else outcome

    def stuck_reclaims(self) -> list[ReclaimRecord]:
        return self._reclaims(ReclaimRow.outcome == "stuck")

    def unfinished_reclaims(self) -> list[ReclaimRecord]:
        """Begun and never finished: after a restart, check these servers again."""
        return self._reclaims(ReclaimRow.outcome.is_(None))

    def reclaims(self, since: dt.datetime | None = None, user: str | None = None) -> list[ReclaimRecord]:
        """The reclaims begun since ``since`` (of ``user``'s servers only, if given), oldest first."""
        where = [ReclaimRow.t >= _aware(since, "since")] if since is not None else []
        if user is not None:  # autoescape: a user name may hold % or _
            where.append(ReclaimRow.session.startswith(user + "/", autoescape=True))
        return self._reclaims(sa.and_(sa.true(), *where))

    def _reclaims(self, where: Any) -> list[ReclaimRecord]:
        with self._session() as db:
            rows = db.scalars(sa.select(ReclaimRow).where(where).order_by(ReclaimRow.t, ReclaimRow.id))
            return [_reclaim(r) for r in rows]

    # ---- observations (trace format)

    def record_observations(self, t: dt.datetime, samples: Iterable[tuple[str, Sample]],
                            pending_gpus: int | None, sessions: Iterable[Session] = ()) -> int:
        """Store one cycle: a ``sample`` line per (session id, sample), a ``pressure`` line
        (unless ``pending_gpus`` is None: unknown) and the ``session`` line of each session
        not yet recorded (pass the cycle's sessions; known ones cost one lookup). Returns the
        number of observation rows written."""
        t = _aware(t, "t")
        rows = [{"t": _aware(s.t, "sample.t"), "kind": "sample", "session": sid,
                 "line": dump_record(TraceSample(session=sid, sample=s))}
                for sid, s in samples]
        if pending_gpus is not None:
            rows.append({"t": t, "kind": "pressure", "session": None,
                         "line": dump_record(Pressure(t=t, pending_gpus=pending_gpus))})
        sessions = {(s.id, _aware(s.started, "started")): s for s in sessions}
        with self._session.begin() as db:
            if sessions:  # one query for which are known, not one per session
                ids = sorted({sid for sid, _ in sessions})
                known = set()
                for chunk in range(0, len(ids), 500):
                    known.update(db.execute(sa.select(TraceSessionRow.session, TraceSessionRow.started)
                                            .where(TraceSessionRow.session.in_(ids[chunk:chunk + 500]))).all())
                new = [{"session": sid, "started": started, "stopped": None,
                        "line": dump_record(TraceSession(session=session))}
                       for (sid, started), session in sessions.items() if (sid, started) not in known]
                if new:
                    db.execute(sa.insert(TraceSessionRow), new)
            if rows:
                db.execute(sa.insert(ObservationRow), rows)  # one executemany
        return len(rows)

    def session_stopped(self, session: str, t: dt.datetime) -> bool:
        """Note that the session's latest recorded instance stopped at ``t`` (trace ``stopped``)."""
        t = _aware(t, "t")
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
            since = _aware(since, "since")
            until = _aware(until, "until") if until is not None else max(now, since)
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

    def prune_observations(self, older_than: dt.datetime) -> int:
        """Delete observations and decisions before ``older_than`` (the retention setting),
        and session lines of instances that stopped before it. Returns the observation rows
        deleted. Intents, warnings and reclaims are kept (see :meth:`prune_records`)."""
        older_than = _aware(older_than, "older_than")
        with self._session.begin() as db:
            n = db.execute(sa.delete(ObservationRow).where(ObservationRow.t < older_than)).rowcount
            db.execute(sa.delete(DecisionRow).where(DecisionRow.t < older_than))
            db.execute(sa.delete(TraceSessionRow).where(TraceSessionRow.stopped < older_than))
        return n

    # ---- exemptions and audit log (schema v2)

    def set_exemption(self, session: str, until: dt.datetime, set_at: dt.datetime, by: str = "") -> None:
        """Exempt ``session`` from reclaim until ``until`` (replacing its current exemption)."""
        until, set_at = _aware(until, "until"), _aware(set_at, "set_at")
        with self._session.begin() as db:
            db.execute(sa.update(ExemptionRow)
                       .where(ExemptionRow.session == session, ExemptionRow.cleared_at.is_(None))
                       .values(cleared_at=set_at))
            db.add(ExemptionRow(session=session, until=until, set_at=set_at, by=by))

    def clear_exemption(self, session: str, t: dt.datetime) -> bool:
        t = _aware(t, "t")
        with self._session.begin() as db:
            return db.execute(sa.update(ExemptionRow)
                              .where(ExemptionRow.session == session, ExemptionRow.cleared_at.is_(None))
                              .values(cleared_at=t)).rowcount > 0

    def exemptions(self, now: dt.datetime) -> dict[str, dict[str, Any]]:
        """The exemptions in force at ``now``: {session: {"until", "set_at", "by"}}."""
        now = _aware(now, "now")
        with self._session() as db:
            rows = db.scalars(sa.select(ExemptionRow).where(ExemptionRow.cleared_at.is_(None),
                                                            ExemptionRow.until > now)
                              .order_by(ExemptionRow.set_at, ExemptionRow.id))
            return {r.session: {"until": r.until, "set_at": r.set_at, "by": r.by} for r in rows}

    def audit(self, actor: str, action: str, session: str = "", t: dt.datetime | None = None,
              **detail: Any) -> None:
        """Record that ``actor`` did ``action`` (to ``session``)."""
        t = _aware(t, "t") if t is not None else utcnow()
        with self._session.begin() as db:
            db.add(AuditRow(t=t, actor=actor, action=action, session=session, detail=_dumps(detail)))

    def audit_log(self, since: dt.datetime | None = None, session: str | None = None, *,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """The audit records, oldest first: {"t", "actor", "action", "session", "detail"}.
        With ``limit``: the newest ``limit`` records only, newest first."""
        newest_first = limit is not None
        order = (AuditRow.t.desc(), AuditRow.id.desc()) if newest_first else (AuditRow.t, AuditRow.id)
        query = sa.select(AuditRow).order_by(*order).limit(limit)
        if since is not None:
            query = query.where(AuditRow.t >= _aware(since, "since"))
        if session is not None:
            query = query.where(AuditRow.session == session)
        with self._session() as db:
            return [_audit(r) for r in db.scalars(query)]

    def history(self, since: dt.datetime | None = None, *, offset: int = 0,
                limit: int = 50) -> tuple[int, list[tuple[str, ReclaimRecord | dict[str, Any]]]]:
        """One page of the reclaims and audit records since ``since``, newest first, for the
        admin API: (how many there are in all, [("reclaim", ReclaimRecord) or ("audit", dict)])."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        r_where = ReclaimRow.t >= _aware(since, "since") if since is not None else sa.true()
        a_where = AuditRow.t >= _aware(since, "since") if since is not None else sa.true()
        # a compound select ordered on its own columns: SQLite merges the two index scans on t
        # and stops after the page (a subquery around it would sort every row first)
        page_query = sa.union_all(
            sa.select(sa.literal_column("'reclaim'").label("kind"), ReclaimRow.id, ReclaimRow.t).where(r_where),
            sa.select(sa.literal_column("'audit'").label("kind"), AuditRow.id, AuditRow.t).where(a_where),
        ).order_by(sa.column("t").desc(), sa.column("id").desc()).offset(offset).limit(limit)
        with self._session() as db:
            total = (db.scalar(sa.select(sa.func.count()).select_from(ReclaimRow).where(r_where))
                     + db.scalar(sa.select(sa.func.count()).select_from(AuditRow).where(a_where)))
            page = [(kind, i) for kind, i, _t in db.execute(page_query)]
            ids = {kind: [i for k, i in page if k == kind] for kind in ("reclaim", "audit")}
            reclaims = {r.id: _reclaim(r) for r in db.scalars(sa.select(ReclaimRow)
                                                               .where(ReclaimRow.id.in_(ids["reclaim"])))}
            audits = {r.id: _audit(r) for r in db.scalars(sa.select(AuditRow).where(AuditRow.id.in_(ids["audit"])))}
        return total, [(kind, reclaims[i] if kind == "reclaim" else audits[i]) for kind, i in page]

    def prune_records(self, older_than: dt.datetime) -> dict[str, int]:
        """Delete what ended before ``older_than`` (the record retention): intents cleared or
        expired, warnings whose episode was closed, exemptions cleared or expired, and audit
        records. Open warnings, current intents and exemptions, and reclaims are kept.
        Returns the rows deleted per table."""
        cut = _aware(older_than, "older_than")
        ended = {
            IntentRow: sa.or_(IntentRow.cleared_at < cut, IntentRow.until < cut),
            ExemptionRow: sa.or_(ExemptionRow.cleared_at < cut, ExemptionRow.until < cut),
            WarningRow: WarningRow.cleared_at < cut,
            AuditRow: AuditRow.t < cut,
        }
        with self._session.begin() as db:
            return {model.__tablename__: db.execute(sa.delete(model).where(where)).rowcount
                    for model, where in ended.items()}

    # ---- decisions log

    def record_decision(self, decision: Decision, t: dt.datetime) -> None:
        self.record_decisions([decision], t)

    def record_decisions(self, decisions: Iterable[Decision], t: dt.datetime) -> int:
        """Record the decisions of one cycle in one transaction; returns how many."""
        t = _aware(t, "t")
        rows = [{"t": t, "session": d.session, "action": d.action, "rule": d.rule, "reason": d.reason,
                 "reclaim_at": _aware(d.reclaim_at, "reclaim_at") if d.reclaim_at else None,
                 "evidence": _dumps(d.evidence)} for d in decisions]
        if rows:
            with self._session.begin() as db:
                db.execute(sa.insert(DecisionRow), rows)
        return len(rows)

    def decisions(self, since: dt.datetime | None = None,
                  session: str | None = None) -> list[tuple[dt.datetime, Decision]]:
        query = sa.select(DecisionRow).order_by(DecisionRow.t, DecisionRow.id)
        if since is not None:
            query = query.where(DecisionRow.t >= _aware(since, "since"))
        if session is not None:
            query = query.where(DecisionRow.session == session)
        with self._session() as db:
            return [(r.t, Decision(session=r.session, action=r.action, rule=r.rule,  # type: ignore[arg-type]
                                   reason=r.reason, reclaim_at=r.reclaim_at, evidence=json.loads(r.evidence)))
                    for r in db.scalars(query)]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers (backtest --from-store) do not block the service
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()
