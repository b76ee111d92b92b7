"""Reading what users send: keep-alive times and durations, the what-if's period and
override, and the error for bad input."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from .. import timestamps
from ..durations import parse_duration
from ..timestamps import parse_time, utcnow


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
            t = parse_time(value, require_offset=True)
            if t is None:  # not reached: an empty value is none of the keys
                raise ValueError
            return t
        if key == "hours":
            if isinstance(value, bool):
                raise ValueError
            return utcnow() + dt.timedelta(hours=float(value))
        return utcnow() + parse_duration(str(value))
    except (ValueError, TypeError, OverflowError):
        raise BadInput(f"{key}: not a valid {'time with a time zone' if key == 'until' else 'duration'}: "
                       f"{value!r}") from None


def parse_since(text: str, name: str = "since", now: dt.datetime | None = None) -> dt.datetime:
    """`since=` (or the field `name`): an ISO 8601 time, or a duration back from now ("7d")."""
    try:
        return timestamps.parse_since(text, now or utcnow())
    except (ValueError, OverflowError):
        raise BadInput(f"{name}: not a time or a duration: {text!r}") from None


def parse_days(text: str, most: int) -> int:
    """`days=N`: a whole number of days from 1 to `most`."""
    if not (text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= most):
        raise BadInput(f"days: a whole number from 1 to {most}, not {text!r}")
    return int(text)


MAX_OVERRIDE_CHARS = 8192  # a few dozen settings and long lists of names


def parse_override(text: str) -> dict[str, Any]:
    """The what-if form's override: one `setting: value` per line, as a policy file writes
    it: a number, true or false, null, a duration ("90m") or a name, a list as [alice, bob];
    lines starting with # are left out. Read line by line (no YAML parser: a hostile text
    nested deep costs seconds there); the values are the settings' converter's business
    (`whatif.override_policy`)."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise BadInput(f"override: at most {MAX_OVERRIDE_CHARS} characters")
    values: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if not colon or not name.isidentifier():
            raise BadInput(f"override, line {n}: write one `setting: value` per line, e.g. idle_reclaim_after: 90m")
        if name in values:
            raise BadInput(f"override, line {n}: {name} is given twice")
        values[name] = _setting_value(value.strip())
    return values


def _setting_value(text: str) -> Any:
    if text.startswith("[") and text.endswith("]"):
        return [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
    try:
        return json.loads(text)  # a number, true, false, null or a "quoted" text
    except (ValueError, RecursionError):
        return text  # a duration or a name


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
    local_now = utcnow() - dt.timedelta(minutes=off)
    t = local_now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if t <= local_now:
        t += dt.timedelta(days=1)
    return t + dt.timedelta(minutes=off)

