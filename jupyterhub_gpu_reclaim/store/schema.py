"""The store's schema: its tables (the ORM models always describe the current version), the
column types, and the migrations from each older version.

``MIGRATIONS[i]`` is a function ``(connection) -> None`` that upgrades a store from version
``i + 1`` to ``i + 2``; the current version is ``len(MIGRATIONS) + 1``. Version 1 is the
first; version 2 added the web pages' exemptions and audit log; version 3 keeps one intent
row per session (a new intent replaces it, a clear marks it); version 4 notes when a user
saw the notice of a reclaim; version 5 holds what users choose (user and server names, so
session ids) in unbounded text columns; version 6 holds the observations in typed columns
(`ObservationRow`, `SessionRow`), no longer as trace lines; version 7 keeps what ran in a
reclaimed server with its reclaim (`ReclaimRow.ran`); version 8 what its JupyterLab tabs
saved before the stop (`ReclaimRow.saved`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..oneline import brief
from ..policy.observations import Kernel, WhatRan, WhatSaved
from ..timestamps import format_time
from .columns import Kernels, PerGpu, StringSet, Times, WhatRanColumn, WhatSavedColumn, v6_sample

UTC = dt.timezone.utc

# MIGRATIONS[i] upgrades version i + 1 to version i + 2. Append, never edit or reorder.
MIGRATIONS: list[Callable[[Connection], None]] = []  # filled below the models


def current_version() -> int:
    return len(MIGRATIONS) + 1


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


# A NUL, which PostgreSQL's text cannot hold and JupyterHub 5 on a SQLite hub database keeps
# in a server name, is stored escaped: ESCAPE (a Unicode noncharacter, never in a name a
# person types) doubles itself and stands before "0" for a NUL, so that every name has one
# stored form and comes back as it was, and a prefix stays a prefix (`stored`).
ESCAPE = "\uffff"
_ESCAPED = re.compile(ESCAPE + "([" + ESCAPE + "0])")


def stored(text: str) -> str:
    """`text` as the store holds it (see ESCAPE): itself unless it holds a NUL or ESCAPE."""
    return text.replace(ESCAPE, ESCAPE * 2).replace("\x00", ESCAPE + "0")


def unstored(text: str) -> str:
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else ESCAPE, text)


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored in every database the store runs on; None when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid Unicode (a lone surrogate)"
    return None


class UserText(sa.types.TypeDecorator):
    """Text a user chooses: user and server names (session ids), who set something. Unbounded:
    with a length, one user's long server name made the batch writes of every cycle fail
    (issue 27). A NUL is stored escaped (`stored`): refused, a server named with one was never
    warned or reclaimed. What no database can hold (`unstorable`, a name the hub cannot hold
    either) is refused with ValueError before it reaches one, the same on SQLite as on
    PostgreSQL."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        if value is None:
            return None
        if (why := unstorable(value)) is not None:
            raise ValueError(f"{brief(value)} cannot be stored: {why}")
        return stored(value)

    def process_result_value(self, value: str | None, dialect) -> str | None:
        return None if value is None else unstored(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return format_time(value) if value.tzinfo else value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot store {type(value).__name__} as JSON: {value!r}")


# one encoder: json.dumps with options makes one a call (the first cycle's decision log at
# 20,000 servers: 20,000 evidence dicts)
dumps = json.JSONEncoder(default=_json_default, separators=(",", ":"), sort_keys=True).encode


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
    session: Mapped[str] = mapped_column(UserText, index=True)
    until: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    set_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    by: Mapped[str] = mapped_column(UserText, default="")
    cleared_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, index=True)


class IntentRow(_UntilRow, Base):
    """Schema v3: one row per session, its latest intent (replaced by the next, marked
    cleared by a clear): what a user writes never grows the table."""

    __tablename__ = "intents"
    __table_args__ = (sa.Index("uq_intents_session", "session", unique=True),)
    session: Mapped[str] = mapped_column(UserText)


class WarningRow(Base):
    __tablename__ = "warnings"
    __table_args__ = (sa.UniqueConstraint("session", "rule", "episode", name="uq_warning_episode"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    session: Mapped[str] = mapped_column(UserText, index=True)
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
    session: Mapped[str] = mapped_column(UserText, index=True)
    episode: Mapped[str] = mapped_column(sa.String(255))
    rule: Mapped[str] = mapped_column(sa.String(64))
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    gpus: Mapped[int]
    evidence: Mapped[str] = mapped_column(sa.Text, default="{}")  # JSON object
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), index=True)
    detail: Mapped[str] = mapped_column(sa.Text, default="")
    seen_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # its user saw the notice of it
    ran: Mapped[WhatRan | None] = mapped_column(WhatRanColumn)  # v7: what ran in it (None: not known)
    saved: Mapped[WhatSaved | None] = mapped_column(WhatSavedColumn)  # v8: what its tabs saved (None: not known)


class SessionRow(Base):
    """Schema v6: one row per session instance (an id and its start) the cycle met: the
    observations' `Session`, and when it stopped (null while it runs)."""

    __tablename__ = "sessions"
    session: Mapped[str] = mapped_column(UserText, primary_key=True)
    started: Mapped[dt.datetime] = mapped_column(UTCDateTime, primary_key=True)
    stopped: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    user: Mapped[str] = mapped_column(UserText)
    server: Mapped[str] = mapped_column(UserText)
    gpus: Mapped[int]
    admin: Mapped[bool]
    profile: Mapped[str] = mapped_column(UserText)
    groups: Mapped[frozenset[str]] = mapped_column(StringSet)
    gpu_type: Mapped[str] = mapped_column(UserText)
    gpu_shared: Mapped[bool]


class ObservationRow(Base):
    """Schema v6: a sample of a session (the fields of the observations' `Sample`), or the
    pressure of a cycle (the GPUs pods wait for), in columns."""

    __tablename__ = "observations"
    id: Mapped[int] = mapped_column(primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))  # "sample" | "pressure"
    session: Mapped[str | None] = mapped_column(UserText)
    gpu_util: Mapped[tuple[float | None, ...] | None] = mapped_column(PerGpu)
    gpu_mem_used_mib: Mapped[tuple[float | None, ...] | None] = mapped_column(PerGpu)
    kernels: Mapped[tuple[Kernel, ...] | None] = mapped_column(Kernels)
    terminals: Mapped[tuple[dt.datetime | None, ...] | None] = mapped_column(Times)
    hub_last_activity: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    pending_gpus: Mapped[int | None]  # a pressure row's


class DecisionRow(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    session: Mapped[str] = mapped_column(UserText, index=True)
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
    actor: Mapped[str] = mapped_column(UserText)
    action: Mapped[str] = mapped_column(sa.String(64))
    session: Mapped[str] = mapped_column(UserText, default="")
    detail: Mapped[str] = mapped_column(sa.Text, default="{}")  # JSON object


def _v1_to_v2(conn: Connection) -> None:
    """v1 → v2: the exemptions and audit tables (web admin actions)."""
    Base.metadata.create_all(conn, tables=[ExemptionRow.__table__, AuditRow.__table__])  # type: ignore[list-item]


MIGRATIONS.append(_v1_to_v2)


def _v2_to_v3(conn: Connection) -> None:
    """v2 → v3: one intent row per session. Every set added a row; keep each session's
    latest (the current intent if it has one: a set cleared all others), then make the
    session unique."""
    t = Base.metadata.tables[IntentRow.__tablename__]
    latest = sa.select(sa.func.max(t.c.id)).group_by(t.c.session).scalar_subquery()
    conn.execute(sa.delete(t).where(t.c.id.not_in(latest)))
    conn.execute(sa.text("DROP INDEX IF EXISTS ix_intents_session"))
    next(i for i in t.indexes if i.name == "uq_intents_session").create(conn, checkfirst=True)


MIGRATIONS.append(_v2_to_v3)


def _v3_to_v4(conn: Connection) -> None:
    """v3 → v4: when its user saw the notice of a reclaim (the hub's home page says what
    happened until then)."""
    if "seen_at" not in {c["name"] for c in sa.inspect(conn).get_columns(ReclaimRow.__tablename__)}:
        conn.execute(sa.text("ALTER TABLE reclaims ADD COLUMN seen_at TIMESTAMP"))


MIGRATIONS.append(_v3_to_v4)


def _v4_to_v5(conn: Connection) -> None:
    """v4 → v5: the columns of what users choose become unbounded text (`UserText`). SQLite
    never enforced their VARCHAR(255): nothing to do there. PostgreSQL changes VARCHAR to
    TEXT in place (binary-compatible: no table rewrite, indexes kept)."""
    if conn.dialect.name == "sqlite":
        return
    present = set(sa.inspect(conn).get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in present:
            continue
        for column in table.columns:
            if isinstance(column.type, UserText):
                conn.execute(sa.text(f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" TYPE TEXT'))


MIGRATIONS.append(_v4_to_v5)


def _v5_to_v6(conn: Connection) -> None:
    """v5 → v6: the observations in typed columns. v5 kept each sample and pressure as a
    trace line (``observations.line``) and each session instance as a session line
    (``trace_sessions.line``); their fields become columns of ``observations`` and of the new
    ``sessions`` table, the same rows in the same order (ids kept). The v5 rows are copied
    aside, the table made anew, and the copy converted a page at a time."""
    present = set(sa.inspect(conn).get_table_names())
    if "observations" in present and "line" in {c["name"] for c in sa.inspect(conn).get_columns("observations")}:
        conn.execute(sa.text("DROP TABLE IF EXISTS observations_v5"))
        conn.execute(sa.text("CREATE TABLE observations_v5 AS SELECT id, t, kind, session, line FROM observations"))
        conn.execute(sa.text("CREATE UNIQUE INDEX ix_observations_v5_id ON observations_v5 (id)"))
        conn.execute(sa.text("DROP TABLE observations"))
        ObservationRow.__table__.create(conn)  # type: ignore[attr-defined]
        old = sa.table("observations_v5", sa.column("id", sa.Integer), sa.column("t", UTCDateTime),
                       sa.column("kind", sa.String), sa.column("session", UserText), sa.column("line", sa.Text))
        new = sa.table("observations", sa.column("id", sa.Integer), sa.column("t", UTCDateTime),
                       sa.column("kind", sa.String), sa.column("session", UserText),
                       *(sa.column(name, sa.Text) for name in _ARRAYS),  # as `columns` writes them
                       sa.column("hub_last_activity", UTCDateTime), sa.column("pending_gpus", sa.Integer))
        last = -1
        while rows := conn.execute(sa.select(old).where(old.c.id > last).order_by(old.c.id).limit(5000)).all():
            last = rows[-1].id
            values = [v for row in rows if (v := _v6_observation(row)) is not None]
            if values:
                conn.execute(sa.insert(new), values)
        conn.execute(sa.text("DROP TABLE observations_v5"))
        if conn.dialect.name == "postgresql":  # the ids were given: the sequence goes on after them
            conn.execute(sa.text("SELECT setval(pg_get_serial_sequence('observations', 'id'), "
                                 "COALESCE(MAX(id), 0) + 1, false) FROM observations"))
    SessionRow.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]
    if "trace_sessions" in present:
        old = sa.table("trace_sessions", sa.column("session", UserText), sa.column("started", UTCDateTime),
                       sa.column("stopped", UTCDateTime), sa.column("line", sa.Text))
        values = []
        for row in conn.execute(sa.select(old)):
            try:
                line = json.loads(row.line)
                texts = [line["user"], line["server"], line.get("profile") or "", line.get("gpu_type") or ""]
                if not all(isinstance(x, str) and unstorable(x) is None for x in texts):
                    continue  # a name this release refused to write in a v6 row: the session was not met
                values.append({"session": row.session, "started": row.started, "stopped": row.stopped,
                               "user": str(line["user"]), "server": str(line["server"]), "gpus": int(line["gpus"]),
                               "admin": bool(line.get("admin")), "profile": str(line.get("profile") or ""),
                               "groups": frozenset(line.get("groups") or ()),
                               "gpu_type": str(line.get("gpu_type") or ""),
                               "gpu_shared": bool(line.get("gpu_shared"))})
            except (ValueError, TypeError, KeyError):
                continue  # not a line this release wrote: a damaged row, not worth refusing to open
        for chunk in range(0, len(values), 5000):
            conn.execute(sa.insert(SessionRow), values[chunk:chunk + 5000])
        conn.execute(sa.text("DROP TABLE trace_sessions"))


_ARRAYS = ("gpu_util", "gpu_mem_used_mib", "kernels", "terminals")


def _v6_observation(row: Any) -> dict[str, Any] | None:
    """The v6 row of a v5 observation row; None for a line this release never wrote."""
    base = {"id": row.id, "t": row._mapping["t"], "kind": row.kind, "session": row.session, "gpu_util": None,
            "gpu_mem_used_mib": None, "kernels": None, "terminals": None, "hub_last_activity": None,
            "pending_gpus": None}
    try:
        line = json.loads(row.line)
        if row.kind == "pressure":
            return {**base, "pending_gpus": int(line["pending_gpus"])}
        if row.kind == "sample":
            return {**base, **v6_sample(line)}
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    return None


MIGRATIONS.append(_v5_to_v6)


def _v6_to_v7(conn: Connection) -> None:
    """v6 → v7: what ran in a reclaimed server, kept with its reclaim (null for the reclaims
    before: not known)."""
    if "ran" not in {c["name"] for c in sa.inspect(conn).get_columns(ReclaimRow.__tablename__)}:
        conn.execute(sa.text("ALTER TABLE reclaims ADD COLUMN ran TEXT"))


MIGRATIONS.append(_v6_to_v7)


def _v7_to_v8(conn: Connection) -> None:
    """v7 → v8: what a reclaimed server's JupyterLab tabs saved before the stop (null for the
    reclaims before: not known)."""
    if "saved" not in {c["name"] for c in sa.inspect(conn).get_columns(ReclaimRow.__tablename__)}:
        conn.execute(sa.text("ALTER TABLE reclaims ADD COLUMN saved TEXT"))


MIGRATIONS.append(_v7_to_v8)

OUR_TABLES = {t for t in Base.metadata.tables if t != "schema_version"}


def aware(value: dt.datetime, name: str) -> dt.datetime:
    """`value` in UTC; ValueError naming the argument for a naive datetime."""
    if value.tzinfo is None:
        raise ValueError(f"{name}: naive datetime {value.isoformat()}: the store takes aware UTC times")
    return value.astimezone(UTC)
