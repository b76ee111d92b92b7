"""The store's observations as a session trace (docs/trace-format.md): what
`backtest --from-store` replays and what the service reloads after a restart.

The store keeps each cycle's lines in the trace format (`Store.record_observations`); this
puts the lines of a time window back in a trace's order, with its config line first and the
session lines that the reader needs before their samples.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable, Iterator

from ..policy.observations import Session
from ..store import Store
from ..timestamps import format_time
from .trace import IntentEvent, Record, TraceConfig, TraceSession, dump_record, read_trace


def export_trace(store: Store, since: dt.datetime | None = None, until: dt.datetime | None = None, *,
                 sessions: Iterable[Session | TraceSession] = (), sample_interval_s: float = 60.0,
                 gpus_total: int = 0, intents: bool = True) -> Iterator[str]:
    """The observations of [since, until] as trace lines (no newlines): the config line,
    then, in time order, the ``session`` lines of recorded sessions (plus ``sessions``,
    for ones never recorded) that overlap the window, their ``sample`` lines, the
    ``pressure`` lines and (``intents``) the intent set/clear events. Samples of a
    session with no session line are left out. ``since`` defaults to the earliest
    observation, ``until`` to now. Join with newlines, or read with :func:`export_records`."""
    stored = store.observations_between(since, until, intents=intents)
    since, until = stored.since, stored.until

    # every instance of each session: (started, stopped, session line dict)
    instances: dict[tuple[str, dt.datetime], tuple[dt.datetime | None, dict]] = {}
    for sid, started, stopped, line in stored.sessions:
        instances[(sid, started)] = (stopped, json.loads(line))
    for extra in sessions:
        record = extra if isinstance(extra, TraceSession) else TraceSession(session=extra)
        started = record.session.started
        if started.tzinfo is None:
            raise ValueError(f"started: naive datetime {started.isoformat()}: give aware UTC times")
        key = (record.id, started.astimezone(dt.timezone.utc))
        if key not in instances:
            instances[key] = (record.stopped, json.loads(dump_record(TraceSession(session=record.session))))
    # an id used again: the earlier instance stopped at the latest when the next started
    by_id: dict[str, list[dt.datetime]] = {}
    for sid, started in instances:
        by_id.setdefault(sid, []).append(started)
    events: list[tuple[dt.datetime, int, int, Any]] = []  # (t, 0 session / 1 other, seq, payload)
    seq = 0
    for sid, starts in by_id.items():
        starts.sort()
        for i, started in enumerate(starts):
            stopped, obj = instances[(sid, started)]
            if i + 1 < len(starts) and (stopped is None or stopped > starts[i + 1]):
                stopped = starts[i + 1]
            if stopped is not None and stopped < since:
                continue
            obj["stopped"] = format_time(stopped) if stopped is not None else None
            seq += 1
            events.append((started, 0, seq, ("session", sid, obj)))
    for t, kind, line_session, line in stored.lines:
        seq += 1
        events.append((t, 1, seq, (kind, line_session, line)))
    for r in stored.intents:
        if r.set_at <= until:  # before since too (its session line may come before since)
            seq += 1
            events.append((r.set_at, 1, seq, ("intent", r.session, IntentEvent(r.set_at, r.session, r.until))))
        if r.cleared_at is not None and since <= r.cleared_at <= until:
            seq += 1
            events.append((r.cleared_at, 1, seq, ("intent", r.session, IntentEvent(r.cleared_at, r.session, None))))
    events.sort(key=lambda e: e[:3])

    yield dump_record(TraceConfig(start=since, end=until, sample_interval_s=sample_interval_s,
                                  gpus_total=gpus_total))
    current: dict[str, int] = {}  # session id → gpus of the instance whose line came last
    for _t, _order, _seq, (kind, sid, payload) in events:
        if kind == "session":
            current[sid] = payload["gpus"]
            yield json.dumps(payload, separators=(",", ":"))
        elif kind == "pressure":
            yield payload
        elif sid not in current:
            continue  # no session line for it: the reader would reject it
        elif kind == "sample":
            util = json.loads(payload).get("gpu_util")
            if util is not None and len(util) != current[sid]:
                continue  # recorded against another instance's GPU count
            yield payload
        else:
            yield dump_record(payload)


def export_records(store: Store, since: dt.datetime | None = None, until: dt.datetime | None = None,
                   **kwargs: Any) -> Iterator[Record]:
    """:func:`export_trace`, read back as typed trace records (validated by the reader)."""
    lines = (line + "\n" for line in export_trace(store, since, until, **kwargs))
    return read_trace(lines, name=f"store {store.name}")
