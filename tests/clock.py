"""The tests' clock: one start time, and `at(...)` for the times after (or before) it.

Tests that drive the code under test with a clock of their own (the policy, the store, the
reclaimer's cycles, the backtest, notices and pages) write their times as `at(25)` (25
minutes after START) or `at(hours=-3)` rather than each defining its start and a helper."""

from __future__ import annotations

import datetime as dt

START = dt.datetime(2026, 11, 2, 8, 0, tzinfo=dt.timezone.utc)


def at(minutes: float = 0, *, hours: float = 0, seconds: float = 0, days: float = 0) -> dt.datetime:
    """START plus the given minutes (and hours, seconds, days); negative for earlier."""
    return START + dt.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
