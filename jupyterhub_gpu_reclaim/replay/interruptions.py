"""Users interrupted: after a reclaim, did the same user come back to that server, and how
soon? What an admin weighs beside the GPU-hours a rule freed (`backtest`'s report, the
what-if). In a trace a user is back at the first busy kernel of the same server (this
session or a later one of the same id: a user who found their server gone starts it again)
after the reclaim. Pure, no I/O.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..policy.observations import Sample
from ..policy.readings import kernel_busy

#: how soon the user came back after a reclaim: the first bucket whose bound is above it
BUCKETS: tuple[tuple[str, dt.timedelta | None], ...] = (
    ("under_30m", dt.timedelta(minutes=30)),
    ("under_2h", dt.timedelta(hours=2)),
    ("under_8h", dt.timedelta(hours=8)),
    ("later", None),
)
NEVER = "never"
LABELS = {"under_30m": "< 30 min", "under_2h": "< 2 h", "under_8h": "< 8 h", "later": "later",
          NEVER: "never"}


def bucket(reclaimed: dt.datetime, returned: dt.datetime | None) -> str:
    """The bucket of a user back at `returned` (None: never) after a reclaim at `reclaimed`."""
    if returned is None:
        return NEVER
    return next(name for name, bound in BUCKETS if bound is None or returned - reclaimed < bound)


def counts(buckets: Iterable[str]) -> dict[str, int]:
    """How many reclaims fell in each bucket, every bucket present, `never` last."""
    out = {name: 0 for name, _ in BUCKETS} | {NEVER: 0}
    for b in buckets:
        out[b] += 1
    return out


def interrupted(by_bucket: dict[str, int]) -> int:
    """The reclaims after which the user came back, however late."""
    return sum(n for name, n in by_bucket.items() if name != NEVER)


@dataclass
class Watched:
    """A reclaim at `reclaimed` whose user's return is watched: `returned` is their first busy
    kernel after it, once seen (None until then, or never)."""

    reclaimed: dt.datetime
    returned: dt.datetime | None = None

    @property
    def bucket(self) -> str:
        """How soon the user came back (`bucket`)."""
        return bucket(self.reclaimed, self.returned)


@dataclass
class Watch:
    """The reclaims waiting for their user's return, per server id."""

    _waiting: dict[str, list[Watched]] = field(default_factory=dict)

    def reclaimed(self, server: str, t: dt.datetime) -> Watched:
        """Watch for the user of `server` after a reclaim at `t`; the entry returned gets the
        time they came back."""
        entry = Watched(t)
        self._waiting.setdefault(server, []).append(entry)
        return entry

    def sample(self, server: str, sample: Sample) -> None:
        """A sample of `server` (any of its sessions), in time order."""
        waiting = self._waiting.get(server)
        if not waiting or not kernel_busy(sample):
            return
        for entry in waiting:
            if sample.t > entry.reclaimed:
                entry.returned = sample.t
        self._waiting[server] = [e for e in waiting if e.returned is None]


def by_rule(reclaims: Iterable[tuple[str, float, str]]) -> dict[str, dict[str, Any]]:
    """(rule, GPU-hours freed, bucket) of each reclaim → per rule, sorted by name: reclaims,
    GPU-hours freed, users interrupted and the buckets."""
    rules: dict[str, list[tuple[float, str]]] = {}
    for rule, freed, b in reclaims:
        rules.setdefault(rule, []).append((freed, b))
    out = {}
    for rule, done in sorted(rules.items()):
        returned = counts(b for _, b in done)
        out[rule] = {"reclaims": len(done), "gpu_hours_freed": round(sum(f for f, _ in done), 6),
                     "users_interrupted": interrupted(returned), "returned": returned}
    return out
