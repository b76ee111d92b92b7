"""Durations as admins write them in config files and on the command line."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s|ms)")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


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
