"""What a store holds, read as the product reads it or with plain SQL, as an admin (or a
later release) reads the database: the tests check what the store keeps without methods
that only they would use."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from jupyterhub_gpu_reclaim.store import Store

EVER = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc))


def decided_sessions(store: Store) -> list[str]:
    """The session of each recorded decision, oldest first, as the usage page reads them."""
    return [sid for _, sid, _ in store.rules_between(*EVER)]


def rows(store: Store, query: str, **params: Any) -> list[sa.Row]:
    """The rows of a plain SQL query."""
    with store.engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def schema_version(store: Store) -> int:
    """The version the schema_version table holds (its one row)."""
    (row,) = rows(store, "select version from schema_version")
    return row.version
