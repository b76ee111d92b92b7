"""Each user's budgets through the pages and API: changes (--user-writes-per-minute) and
reads (READS_PER_MINUTE), a token bucket per user each, in memory. (The `limits` package's
in-memory storage wakes a timer thread every 10 ms; a bucket is a few lines.)"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


#: reads (pages, API GETs) a minute per user, in bursts of as many: a page and its calls are
#: a handful, the lab extension's poll 6 a minute per tab; one user's loop (762 a second,
#: issue 27) is held to 5 a second, so that it cannot slow the pages for everyone
READS_PER_MINUTE = 300


@dataclass
class WriteLimiter:
    """`per_minute` requests (changes, or reads) a minute per key, in bursts of as many; 0: no limit."""

    per_minute: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # key → (tokens, at)

    def take(self, key: str) -> float:
        """Spend one change of `key`: 0.0 when allowed, else the seconds until one is."""
        if self.per_minute <= 0:
            return 0.0
        now = self.clock()
        rate = self.per_minute / 60.0
        tokens, at = self._buckets.get(key, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - at) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > 10_000:
                self._forget_full(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (they start full anyway)."""
        rate = self.per_minute / 60.0
        self._buckets = {k: (t, at) for k, (t, at) in self._buckets.items()
                         if t + (now - at) * rate < self.per_minute}
