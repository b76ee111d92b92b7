"""Times, read and written in one place.

Inside the package every time is an aware datetime in UTC (`utcnow`). Outside it is
RFC 3339 in UTC: `format_time` writes ``2026-11-02T08:00:00Z``, with microseconds only
when there are some (traces, the store's records, the JSON API, pod annotations);
`jsonable` makes every datetime in a JSON value so. One exception, kept on purpose:
`evidence_time`, the times in a policy decision's evidence, are `datetime.isoformat`'s
(``...+00:00``), because the store's warning and reclaim episodes are keyed by them
(``gpu-idle@2026-11-02T08:00:00+00:00``): written another way, a restarted service would
not recognise the episodes it already warned.

Reading has two contracts, named apart:

- `parse_time` is strict, for what anyone may have written: the hub's and users' servers'
  answers, a trace, a record, a field of a request. An ISO 8601 date and time (a string)
  → aware UTC; None or "" → None; anything else — not a string, malformed, longer than
  `MAX_LENGTH`, outside 1970-2999 once in UTC — raises ValueError, and nothing else. A
  time without an offset is UTC, as JupyterHub and idle-culler take it, unless the caller
  requires the offset (`require_offset=True`: traces, API input).
- `parse_time_lenient` is for the Kubernetes objects the spawner reads as its client
  hands them over: what `parse_time` reads, or a datetime; None for anything else, never
  an error.

`parse_since` reads a start time as commands and the API take it: a duration back from
now ("7d", "36h", "1h30m") or a time.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .durations import parse_duration
from .oneline import brief

UTC = dt.timezone.utc
# No hub, server or cluster clock reports a time outside these; times near datetime's own
# limits would overflow in the arithmetic that follows (an idle clock, a deadline).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=UTC)
LATEST = dt.datetime(3000, 1, 1, tzinfo=UTC)
MAX_LENGTH = 64  # "2026-01-05T09:00:00.123456+00:00" is 32


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


def format_time(value: dt.datetime) -> str:
    """An aware datetime → ``2026-11-02T08:00:00Z`` (with microseconds only when present)."""
    if value.tzinfo is None:
        raise ValueError("naive datetime: times are written in UTC")
    value = value.astimezone(UTC)
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def jsonable(value: Any) -> Any:
    """A JSON value with each datetime in it (in dicts, lists, tuples) written by `format_time`."""
    if isinstance(value, dt.datetime):
        return format_time(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def evidence_time(t: dt.datetime | None) -> str | None:
    """A time in a decision's evidence (see above: `isoformat`, never changed); None stays None."""
    return None if t is None else t.isoformat()


def parse_time(value: object, *, require_offset: bool = False) -> dt.datetime | None:
    """An ISO 8601 timestamp as JupyterHub, Jupyter Server, Kubernetes and RFC 3339 write
    it ("...Z", "...+02:00", up to nanoseconds) → an aware UTC datetime. None or "" is
    None. Anything else — not a string, malformed, too long, without an offset when
    `require_offset`, outside 1970-2999 once in UTC ("9999-12-31T23:59:59-23:59") — raises
    ValueError, and nothing else."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {type(value).__name__} {brief(value)}")
    if len(value) > MAX_LENGTH:
        raise ValueError(f"not a timestamp: {len(value)} characters: {brief(value)}")
    if not (value.isascii() and value.isprintable()):  # fromisoformat skips some bytes
        raise ValueError(f"not a timestamp: {value!r}")
    # RFC 3339 allows a lowercase "z", which fromisoformat does not read
    text = value[:-1] + "Z" if value.endswith("z") else value
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a timestamp: {value!r}") from None
    if t.tzinfo is None:
        if require_offset:
            raise ValueError(f"not a timestamp with a UTC offset: {value!r}")
        t = t.replace(tzinfo=UTC)
    try:
        t = t.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp out of range once in UTC: {value!r}") from None
    if not EARLIEST <= t < LATEST:
        raise ValueError(f"timestamp out of range (1970-2999): {value!r}")
    return t


def parse_time_lenient(value: object) -> dt.datetime | None:
    """What `parse_time` reads (surrounding blanks allowed), or a datetime (naive: UTC),
    as an aware UTC datetime; None for anything else."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    try:
        return parse_time(value.strip() if isinstance(value, str) else value)
    except ValueError:
        return None


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """A duration back from `now` ("7d", "36h", "1h30m") or a time (`parse_time`: UTC
    when it has no offset). ValueError when it is neither; OverflowError when the
    duration reaches back beyond the calendar."""
    try:
        back = parse_duration(text)
    except ValueError:
        t = parse_time(text)
        if t is None:
            raise ValueError(f"not a time or a duration: {text!r}") from None
        return t
    return now - back
