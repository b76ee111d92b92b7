"""The store's observations as a session trace (docs/trace-format.md): what
`backtest --from-store` and the what-if replay, and what `export_trace` writes.

The store keeps typed rows (`Store.observations_between`) and puts a window of them in
time order (`StoredObservations.timeline`); this makes trace records of them, with the
config line first.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable, Iterator

from ..policy.observations import IntentChange, Pressure, Session, SessionInstance, SessionSample
from ..store import Store
from ..store.observation_log import Event
from .trace import Record, TraceConfig, TraceSession, dump_record


def export_records(store: Store, since: dt.datetime | None = None, until: dt.datetime | None = None, *,
                   sessions: Iterable[Session | SessionInstance] = (), sample_interval_s: float = 60.0,
                   gpus_total: int = 0, intents: bool = True) -> Iterator[Record]:
    """The observations of [since, until] as trace records: the config, then, in time
    order, the sessions recorded (plus ``sessions``, for ones never recorded) that overlap
    the window, their samples, the pressure and (``intents``) the intent set/clear events.
    Samples of a session with no session record are left out. ``since`` defaults to the
    earliest observation, ``until`` to now."""
    stored = store.observations_between(since, until, intents=intents)
    extra = [s if isinstance(s, SessionInstance) else SessionInstance(s) for s in sessions]
    yield TraceConfig(start=stored.since, end=stored.until, sample_interval_s=sample_interval_s,
                      gpus_total=gpus_total)
    for event in stored.timeline(extra):
        yield record(event)


def record(event: Event) -> Record:
    """The trace record of one of the store's events: an instance is a ``session`` line; a
    sample, the pressure and an intent change are trace records as they are."""
    if isinstance(event, SessionInstance):
        return TraceSession(session=event.session, stopped=event.stopped)
    if isinstance(event, (SessionSample, Pressure, IntentChange)):
        return event
    raise TypeError(f"not a stored event: {event!r}")


def export_trace(store: Store, since: dt.datetime | None = None, until: dt.datetime | None = None,
                 **kwargs) -> Iterator[str]:
    """:func:`export_records` as trace lines (no newlines): join them with newlines."""
    return map(dump_record, export_records(store, since, until, **kwargs))
