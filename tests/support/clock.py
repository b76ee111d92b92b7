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


#: Yale's points for a GPU never used (warn at 30 min, reclaim at 60), which the tests of the
#: service's cycles are written in; the defaults give a notebook 1 h / 2 h (docs/policy.md)
YALE_NEVER_USED = {"never_used_warn_after": dt.timedelta(minutes=30),
                   "never_used_reclaim_after": dt.timedelta(minutes=60)}
