"""Time as the Kubernetes API writes it: `metav1.Time`, RFC 3339 in UTC to the second
("2006-01-02T15:04:05Z"), and the simulator's clock.

Kubernetes objects carry times as RFC 3339 strings (https://kubernetes.io/docs/reference/
kubernetes-api/common-definitions/object-meta/: "It is represented in RFC3339 form and is
in UTC"); `MicroTime` fields (an Event's `eventTime`) add microseconds."""

from __future__ import annotations

import datetime as dt
import re

UTC = dt.timezone.utc
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})?")


def utcnow() -> dt.datetime:
    """Now, in UTC (aware)."""
    return dt.datetime.now(UTC)


def rfc3339(t: dt.datetime | None = None) -> str:
    """`metav1.Time`: RFC 3339 in UTC with second precision (now, if no time is given)."""
    t = t or utcnow()
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: dt.datetime | None = None) -> str:
    """`metav1.MicroTime` (a Lease's renewTime, an Event's eventTime): RFC 3339 in UTC with
    microseconds."""
    t = t or utcnow()
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 time (`Time` or `MicroTime`) as an aware datetime in UTC; None for a
    missing one (None or ""); ValueError for anything else. A time without an offset is
    read as UTC, the zone the API writes every time in."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError(f"{value!r} is not an RFC 3339 time")
    t = dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def go_duration(seconds: float) -> str:
    """A duration as the kubelet prints it: Go's Duration.String, truncated to
    milliseconds (`750ms`, `5.01s`, `1m20s`, `5m0s`)."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs
