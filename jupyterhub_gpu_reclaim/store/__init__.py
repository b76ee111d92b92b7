"""The reclaimer's store: intents, warnings, reclaim records (with their evidence and stuck
stops), the observations of each cycle (typed rows: samples, pressure, session instances) and, optionally, the
decisions log. A restart loses no intent or warning, and the store refuses a second warning
or a second stop for the same episode.

SQLAlchemy 2, synchronous. ``Store.open(url)`` takes any SQLAlchemy URL (``sqlite:///...``
by default; ``postgresql+psycopg://...`` with that driver installed) or a plain file path,
which means a SQLite file. Every method is one short transaction, and the service calls
them from its event loop directly, as JupyterHub calls its own database: on a SQLite store
holding 14 days of 1,000 GPU sessions' observations (2 million rows), a cycle's calls take
1-25 ms each and its observations write ~120 ms, once per cycle; the pages' queries 4-25 ms
(``benchmarks/store_queries.py``, on a busy 2-core machine). A thread per call would buy
nothing at these times and cost a hop on each.

Times go in and come out as timezone-aware UTC datetimes. They are stored as naive UTC
(SQLite keeps no offset); a naive datetime passed in is refused with ValueError. Evidence
dicts are stored as JSON: datetimes in them come back as RFC 3339 strings, tuples as lists.

Schema versions (`schema`): the ``schema_version`` table holds one row. A new database
gets the current tables directly; an older one is upgraded step by step (each step in its
own transaction, the version row updated with it); a newer one (written by a later
release) is refused with :class:`~.base.StoreVersionError`.

Episodes: the caller names an episode (for example ``"alice/@2026-11-02T10:00:00Z"``: the
session id and the start of its idle spell). ``record_warning`` is idempotent per
(session, rule, episode); ``begin_reclaim`` allows one reclaim per (session, episode) and
none while another reclaim of the session is unfinished (begun, or stuck).
"""

from __future__ import annotations

from .audit import HistoryStore
from .intents import IntentStore
from .observation_log import ObservationStore
from .reclaims import ReclaimStore


class Store(IntentStore, ReclaimStore, ObservationStore, HistoryStore):
    """The store: open with :meth:`open`; close with :meth:`close` (or use it as a context
    manager). Its parts (modules of this package): `base` (opening, versions), `schema`
    (tables, migrations), `intents` (intents, exemptions), `reclaims` (warnings, reclaims),
    `observations` (each cycle's samples, pressure and sessions), `columns` (their column types), `history` (audit log, decisions, pruning)."""
