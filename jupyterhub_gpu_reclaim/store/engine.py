"""Opening and closing a store: the database URL, the engine, the schema version check and
upgrade. `StoreBase` is the part of `Store` the others stand on (`self._session`)."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Mapping, Self, Sequence, cast

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.orm import sessionmaker

from . import schema
from .. import DEFAULT_STORE_URL
from ..oneline import brief, one_line
from .schema import OUR_TABLES, Base, SchemaVersion, current_version, unstorable



class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says which store and why."""


class StoreVersionError(StoreError):
    """The database's schema version is not one this release can read."""


class RowsRefused(StoreError):
    """Some sessions' rows could not be written; all the others' were. ``refused``: {session:
    why}."""

    def __init__(self, what: str, refused: dict[str, str]):
        self.refused = refused
        super().__init__(f"the {what} of {len(refused)} session(s) could not be written: "
                         + "; ".join(f"{brief(sid)}: {why}" for sid, why in list(refused.items())[:5]))


# (the model, the row) of each row a session's insert writes
Rows = Sequence[tuple[type[Base], dict[str, Any]]]


def make_url(url: str | os.PathLike) -> sa.URL:
    """The SQLAlchemy URL of `url`: a plain path means a SQLite file."""
    text = os.fspath(url)
    if "://" not in text:  # a plain path: a SQLite file
        return sa.URL.create("sqlite", database=os.path.abspath(text))
    try:
        return sa.make_url(text)
    except sa_exc.ArgumentError as e:
        raise StoreError(f"store URL {text!r} is not a SQLAlchemy URL: {e}") from None


class StoreBase:
    """Open with :meth:`open`; close with :meth:`close` (or use it as a context manager)."""

    def __init__(self, engine: Engine, name: str):
        self.engine = engine
        self.name = name
        self._session = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str | os.PathLike = DEFAULT_STORE_URL, **engine_kwargs: Any) -> Self:
        """Open (creating or upgrading) the store at ``url``. Raises :class:`StoreError` with
        the URL (password hidden) and the reason when that fails."""
        parsed = make_url(url)
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
                ours = sorted(tables & OUR_TABLES)
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
                schema.MIGRATIONS[version - 1](conn)  # read at run time: tests add one
                version += 1
                conn.execute(sa.update(SchemaVersion).where(SchemaVersion.id == 1).values(version=version))

    def _insert_by_session(self, what: str, rows: Mapping[str | None, Rows]) -> None:
        """Insert each session's rows (under None: rows of no session): all in one
        transaction, or when that fails each session's in its own, so that no session's
        rows (a user's server name) can keep the others' out. Raises :class:`RowsRefused`
        naming the sessions whose rows were not written."""
        refused = {sid: why for sid in rows if sid is not None and (why := unstorable(sid)) is not None}
        todo = {sid: group for sid, group in rows.items() if sid not in refused and group}
        try:
            with self._session.begin() as db:
                _insert(db, [row for group in todo.values() for row in group])
        except (sa_exc.SQLAlchemyError, ValueError):  # ValueError: a bind the driver refuses
            for sid, group in todo.items():
                try:
                    with self._session.begin() as db:
                        _insert(db, group)
                except (sa_exc.SQLAlchemyError, ValueError) as e:
                    first = (str(getattr(e, "orig", None) or e).splitlines() or [type(e).__name__])[0]
                    refused[sid or "(no session)"] = one_line(first)[:200]
            if len(refused) == len(rows):  # nothing written: the database, not one session's rows
                raise
        if refused:
            raise RowsRefused(what, refused)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Store {self.name}>"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers (backtest --from-store) do not block the service
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


# rows of one executemany (and of one transaction of decisions): each is copied into what the
# driver is handed (SQLAlchemy's parameters, or `_bound`'s), and 20,000 at once took tens of MiB
ROWS_AT_ONCE = 1000
# a column type's bind processor for a dialect: a value as its driver takes it (None: as it is)
Processor = Callable[[Any], Any] | None
_UNSEEN = object()


def _insert(db: Any, rows: Rows) -> None:
    """Executemany per model (ROWS_AT_ONCE rows each), in the order of their first rows."""
    by_model: dict[type[Base], list[dict[str, Any]]] = {}
    for model, row in rows:
        by_model.setdefault(model, []).append(row)
    conn = db.connection()
    for model, values in by_model.items():
        # the table's insert (Core: one executemany), not the model's: the ORM's bulk insert
        # took half the first cycle's decision log at 20,000 servers (a statement a few rows)
        table = cast(sa.Table, model.__table__)
        for start in range(0, len(values), ROWS_AT_ONCE):
            chunk = values[start:start + ROWS_AT_ONCE]
            prepared = _prepared(table, tuple(chunk[0]), conn.dialect) if conn.dialect.name == "sqlite" else None
            if prepared is None:
                db.execute(sa.insert(table), chunk)
            else:
                sql, processors = prepared
                columns = [_bound(chunk, key, process) for key, process in processors.items()]
                conn.exec_driver_sql(sql, list(zip(*columns, strict=True)))


@functools.lru_cache(maxsize=32)
def _prepared(table: sa.Table, keys: tuple[str, ...], dialect: Dialect) -> tuple[str, dict[str, Processor]] | None:
    """SQLite: the insert of rows naming `keys` as its driver takes it, and each key's bind
    processor (its column type's, as SQLAlchemy finds it); None where the rows leave a
    column to its default (SQLAlchemy fills it). sqlite3 runs an executemany as one
    statement bound and stepped a row at a time in C; SQLAlchemy's executemany took twice
    as long, most of it each row's parameters in Python (a quarter of the first cycle's
    decision log at 20,000 servers: docs/benchmarks.md). Other drivers (psycopg2) send a
    statement a row, which SQLAlchemy's executemany batches."""
    compiled = sa.insert(table).compile(dialect=dialect, column_keys=list(keys))
    if compiled.positiontup != list(keys):
        return None
    return compiled.string, {key: table.c[key].type.dialect_impl(dialect).bind_processor(dialect) for key in keys}


def _bound(rows: list[dict[str, Any]], key: str, process: Processor) -> list[Any]:
    """The values of `key` in `rows` as the driver takes them. A bind processor is a function
    of the value: one the row before held too (the cycle's time, a None) is processed once."""
    if process is None:
        return [row[key] for row in rows]
    out, last, done = [], _UNSEEN, None
    for row in rows:
        value = row[key]
        if value is not last:
            last, done = value, process(value)
        out.append(done)
    return out


def rowcount(result: sa.Result[Any]) -> int:
    """The rows an UPDATE or DELETE matched: Session.execute answers those with a
    CursorResult, though its type says Result."""
    assert isinstance(result, sa.CursorResult), type(result)
    return result.rowcount
