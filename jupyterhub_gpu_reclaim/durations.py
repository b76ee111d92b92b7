"""Durations as admins write them in config files and on the command line (`parse_duration`),
and as the pages and messages say them to people (`format_duration`; GPU-hours: `format_hours`)."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

HOUR = dt.timedelta(hours=1)  # GPU-hours are counted in it (the backtest, the what-if, usage)
DAY = dt.timedelta(days=1)  # the admin page's days and the usage report's

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s|ms)")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def seconds_or_off(value: dt.timedelta | None) -> float:
    """An optional duration as an option holds it: seconds, 0 for None (off)."""
    return 0.0 if value is None else value.total_seconds()


def format_duration(seconds: float | dt.timedelta | None) -> str:
    """"40 s" under a minute, "2 min", "1 h", "1 h 5 min", "2 d 3 h"; rounded down, never
    overstated; "" for None."""
    if seconds is None:
        return ""
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if hours >= 24:
        return f"{hours // 24} d {hours % 24} h" if hours % 24 else f"{hours // 24} d"
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def format_exact(seconds: float) -> str:
    """A configured duration as people read it, nothing rounded away: "3 min", "1 min 30 s",
    "2 d 1 h", "0.5 s" (the what-if echoes a setting so)."""
    whole, fraction = divmod(float(seconds), 1)
    days, rest = divmod(int(whole), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n]
    if secs or fraction or not parts:
        parts.append(f"{secs + fraction:g} s")
    return " ".join(parts)


def format_hours(hours: float | None) -> str:
    """GPU-hours (or hours) as people read them: "6 min", not "0.1 h"; "2 h 30 min", "312 h"
    (hours, not days: GPU time is counted in them); "0" for none; `format_duration`'s words
    and rounding."""
    if not hours or hours <= 0:
        return "0"
    seconds = hours * HOUR.total_seconds()
    if hours < 24:
        return format_duration(seconds)
    whole, minutes = divmod(int(seconds) // 60, 60)
    return f"{whole} h {minutes} min" if minutes else f"{whole} h"


def parse_duration(value: Any) -> dt.timedelta:
    """Seconds (a number or numeric string) or "90s", "30m", "2h", "1d", "1h30m"."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"not a duration: {value!r}")
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        try:
            return dt.timedelta(seconds=value)
        except OverflowError:  # beyond timedelta's 999999999 days
            raise ValueError(f"duration too long: {value!r}") from None
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        try:
            return parse_duration(float(text))
        except ValueError:
            pass
        pos, total = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            try:
                return parse_duration(total)
            except ValueError:
                raise ValueError(f"duration too long: {value!r}") from None
    raise ValueError(f"not a duration (seconds, or like 30m, 2h, 1h30m): {value!r}")
