"""Time formats the Kubernetes API uses."""

from __future__ import annotations

import datetime as dt


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def rfc3339(t: dt.datetime | None = None) -> str:
    """`metav1.Time`: RFC 3339 in UTC with second precision."""
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro(t: dt.datetime | None = None) -> str:
    """`metav1.MicroTime`: RFC 3339 in UTC with microseconds (events' eventTime)."""
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
