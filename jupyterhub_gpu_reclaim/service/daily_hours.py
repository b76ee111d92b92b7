"""GPU-hours per day from what the service recorded (the admin page's week): held by
sessions, idle among those, freed by reclaims, and requested by pods waiting for a GPU.

- **held**: each recorded session with GPUs, its GPUs from its start to its stop (or now);
- **idle**: the part of that while its recorded decision read the GPUs as idle (a rule of
  `policy.IDLE_RULES`, as the admin page counts idle GPUs), from each change of decision to
  the next or the session's stop;
- **freed**: each completed reclaim frees its GPUs for `FREED_HORIZON` after its stop (the
  same count as a reclaim record's `gpu_hours_freed`): what the session would at least have
  held on, idle, had nobody reclaimed it is unknowable, so a day is the figure's horizon;
- **waiting**: the GPUs requested by pods waiting for one (each cycle's `pressure`), until
  the next cycle, a gap of more than `MAX_STEP` counting as unknown.

Reads the store; no clock (``now`` is an argument), no writes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..durations import DAY, HOUR
from ..policy.decider import IDLE_RULES
from ..store import Store
from ..store.audit import RuleChange

FREED_HORIZON = dt.timedelta(hours=24)  # how long a reclaim counts as freeing its GPUs
MAX_STEP = dt.timedelta(minutes=10)  # a longer gap between two recorded cycles: no data
#: what "freed" and "waited for" count, as the pages say it
FREED_MEANS = "each reclaim's GPUs for a day after it"
WAITING_MEANS = "GPUs requested by pods waiting for one"


@dataclass(frozen=True)
class DayUsage:
    """GPU-hours of one UTC day (up to `end`: now, for today)."""

    start: dt.datetime
    end: dt.datetime
    held: float
    idle: float
    freed: float
    waiting: float


def freed_gpu_hours(gpus: int, stopped: dt.datetime, now: dt.datetime) -> float:
    """The GPU-hours a reclaim of `gpus` GPUs, stopped at `stopped`, has freed by `now`."""
    return gpus * _overlap(stopped, stopped + FREED_HORIZON, stopped, now)


def _overlap(a0: dt.datetime, a1: dt.datetime, b0: dt.datetime, b1: dt.datetime) -> float:
    """Hours of [a0, a1) ∩ [b0, b1)."""
    return max(dt.timedelta(0), min(a1, b1) - max(a0, b0)) / HOUR


class _Timed(Protocol):
    @property
    def t(self) -> dt.datetime: ...


T = TypeVar("T", bound=_Timed)


def _spans(timed: list[T], end: dt.datetime) -> list[tuple[T, dt.datetime]]:
    """Each record (at its `t`) with the time the next one starts (`end` for the last)."""
    return list(zip(timed, [x.t for x in timed[1:]] + [end] * bool(timed), strict=True))


def day_bounds(now: dt.datetime, days: int) -> list[tuple[dt.datetime, dt.datetime]]:
    """The last `days` UTC days up to `now` (today's up to `now`), oldest first."""
    first = (now - (days - 1) * DAY).replace(hour=0, minute=0, second=0, microsecond=0)
    return [(first + i * DAY, min(first + (i + 1) * DAY, now)) for i in range(days)]


def _spread(bounds: list[tuple[dt.datetime, dt.datetime]], into: list[float], start: dt.datetime, end: dt.datetime,
            gpus: float) -> None:
    for i, (d0, d1) in enumerate(bounds):
        into[i] += gpus * _overlap(start, end, d0, d1)


def freed_by_day(store: Store, bounds: list[tuple[dt.datetime, dt.datetime]], now: dt.datetime) -> list[float]:
    """The GPU-hours the completed reclaims freed on each day of `bounds` (unrounded)."""
    freed = [0.0] * len(bounds)
    for r in store.reclaims(bounds[0][0] - FREED_HORIZON):
        if r.outcome == "stopped" and r.finished_at is not None:
            _spread(bounds, freed, r.finished_at, min(r.finished_at + FREED_HORIZON, now), r.gpus)
    return freed


def waiting_by_day(store: Store, bounds: list[tuple[dt.datetime, dt.datetime]], now: dt.datetime) -> list[float]:
    """The GPU-hours pods waited for on each day of `bounds` (unrounded)."""
    waiting = [0.0] * len(bounds)
    for p, next_t in _spans(store.pressure_between(bounds[0][0], now), now):
        if p.pending_gpus:
            _spread(bounds, waiting, p.t, min(next_t, p.t + MAX_STEP), p.pending_gpus)
    return waiting


def daily_usage(store: Store, now: dt.datetime, days: int = 7) -> list[DayUsage]:
    """The last `days` UTC days up to `now`, oldest first."""
    bounds = day_bounds(now, days)
    first = bounds[0][0]
    held, idle = [0.0] * days, [0.0] * days
    instances = store.gpu_instances_between(first, now)
    for s in instances:
        _spread(bounds, held, s.t, s.stopped or now, s.session.gpus)
    # each session's decisions, to the instance that was running then
    changes: dict[str, list[RuleChange]] = {}
    for c in store.rules_between(first, now):
        changes.setdefault(c.session, []).append(c)
    for s in instances:
        end = s.stopped or now
        mine = [c for c in changes.get(s.id, ()) if s.t <= c.t < end]
        for c, until in _spans(mine, end):
            if c.rule in IDLE_RULES:
                _spread(bounds, idle, max(c.t, s.t), min(until, end), s.session.gpus)
    freed, waiting = freed_by_day(store, bounds, now), waiting_by_day(store, bounds, now)
    return [DayUsage(start=d0, end=d1, held=round(held[i], 2), idle=round(idle[i], 2), freed=round(freed[i], 2),
                     waiting=round(waiting[i], 2)) for i, (d0, d1) in enumerate(bounds)]
