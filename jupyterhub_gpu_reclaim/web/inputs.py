"""Reading what users send: keep-alive times and durations, and the error for bad input."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..durations import parse_duration
from ..signals.base import parse_time
from .render import UTC, now


class BadInput(Exception):
    """Bad input from the user: 400 with this message, nothing changed."""


def parse_until(body: dict[str, Any], cap: dt.timedelta) -> dt.datetime:
    """`{"until": ISO time}` or `{"duration": "2h"}` / `{"hours": 2}` → an aware time."""
    keys = [k for k in ("until", "duration", "hours") if body.get(k) not in (None, "")]
    if len(keys) != 1:
        raise BadInput('give exactly one of "until" (an ISO 8601 time), "duration" (e.g. "2h") or "hours"')
    key = keys[0]
    value = body[key]
    try:
        if key == "until":
            t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            if t.tzinfo is None:
                raise ValueError("no time zone")
            return t.astimezone(UTC)
        if key == "hours":
            if isinstance(value, bool):
                raise ValueError
            return now() + dt.timedelta(hours=float(value))
        return now() + parse_duration(str(value))
    except (ValueError, TypeError, OverflowError):
        raise BadInput(f"{key}: not a valid {'time with a time zone' if key == 'until' else 'duration'}: "
                       f"{value!r}") from None


def parse_since(text: str) -> dt.datetime:
    """`since=`: an ISO 8601 time, or a duration back from now ("7d")."""
    try:
        return parse_time(text) if "T" in text else now() - parse_duration(text)
    except (ValueError, OverflowError):
        raise BadInput(f"since: not a time or a duration: {text!r}") from None


def local_time_to_utc(text: str, tz_offset: str) -> dt.datetime:
    """"HH:MM" in the browser's zone (tz_offset: minutes as JS getTimezoneOffset gives, 0 without
    JS: UTC) → the next such moment, in UTC."""
    try:
        hh, mm = (int(x) for x in text.split(":")[:2])
        off = int(tz_offset or 0)
        if not (0 <= hh < 24 and 0 <= mm < 60 and -900 <= off <= 900):
            raise ValueError
    except ValueError:
        raise BadInput(f"not a time HH:MM: {text!r}") from None
    local_now = now() - dt.timedelta(minutes=off)
    t = local_now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if t <= local_now:
        t += dt.timedelta(days=1)
    return t + dt.timedelta(minutes=off)

