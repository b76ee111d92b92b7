"""What a store holds, read as the product reads it or with plain SQL, as an admin (or a
later release) reads the database: the tests check what the store keeps without methods
that only they would use."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store.schema import DecisionRow

EVER = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc))


def decided_sessions(store: Store) -> list[str]:
    """The session of each recorded decision, oldest first, as the usage page reads them."""
    return [c.session for c in store.rules_between(*EVER)]


@dataclass(frozen=True)
class RecordedDecision:
    """A decision as the decisions log keeps it: its evidence as written (`Decision.shown()`)."""

    session: str
    action: str
    rule: str
    reason: str
    reclaim_at: dt.datetime | None
    evidence: dict[str, Any]


def decisions_of(store: Store, session: str) -> list[tuple[dt.datetime, RecordedDecision]]:
    """The decisions recorded for `session`, oldest first, read from their rows (the store's
    own table mapping: times as UTC, names as they were)."""
    query = sa.select(DecisionRow).where(DecisionRow.session == session).order_by(DecisionRow.t, DecisionRow.id)
    with Session(store.engine) as db:
        return [(r.t, RecordedDecision(session=r.session, action=r.action, rule=r.rule,
                                       reason=r.reason, reclaim_at=r.reclaim_at, evidence=json.loads(r.evidence)))
                for r in db.scalars(query)]


def rows(store: Store, query: str, **params: Any) -> list[sa.Row]:
    """The rows of a plain SQL query."""
    with store.engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def schema_version(store: Store) -> int:
    """The version the schema_version table holds (its one row)."""
    (row,) = rows(store, "select version from schema_version")
    return row.version
