"""The usage report's figures (report/usage.py: GPU-hours held, used, idle, idle in long
stretches and without a reading, per UTC day, user and profile) from what the service
recorded, on the report's step grid, so that they read as the report reads Prometheus:

- **held**: each GPU of a recorded instance at each step's instant from its start to its
  stop (or `until`, while it runs);
- each such step is **used** when a sample of the instance within the step read the GPU at
  or above the threshold; else what the instance's latest sample read (used, idle, or no
  reading for a GPU without a value); a sample counts until the next one, at most
  `max_gap` later (the service down, or the GPU data missing: **no reading**).

The instances' groups (as the hub gave them to the service) come along. Reads the store; no
clock, no writes."""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass, field

from ..report.timelines import IDLE, NO_VALUE, USED, PodInfo
from ..report.run import DEFAULT_STEP
from ..report.sessions import Segment, Session
from ..report.usage import Hours, day_bounds, usage_rows
from ..store import Store
from ..policy.observations import SessionInstance

STEP = DEFAULT_STEP

Rows = dict[tuple[str, str, str], Hours]
Util = tuple[float | None, ...] | None


@dataclass
class RecordedUsage:
    """The record's GPU-hours per (day, user, profile), and who is in which group."""

    rows: Rows = field(default_factory=dict)
    groups: dict[str, set[str]] = field(default_factory=dict)  # {group: member names}


def grid_start(t: dt.datetime) -> float:
    """The first step of the grid at or after `t`."""
    return math.ceil(t.timestamp() / STEP) * STEP


def recorded_usage(store: Store, since: dt.datetime, until: dt.datetime, threshold: float,
                   long_idle_steps: int, max_gap: dt.timedelta) -> RecordedUsage:
    """The record's figures for the steps from `since` to `until`."""
    out = RecordedUsage()
    if until < since:
        return out
    instances: dict[str, list[SessionInstance]] = {}
    for instance in store.gpu_instances_between(since, until):
        instances.setdefault(instance.session.id, []).append(instance)
        for group in instance.session.groups:
            out.groups.setdefault(group, set()).add(instance.session.user)

    def add(instance: SessionInstance, times: list[float], utils: list[Util]) -> None:
        found = _session(instance, (times, utils), since, until, threshold, max_gap)
        if found is None:
            return
        first, n, session = found
        s = instance.session
        rows = usage_rows([session], {session.pod: PodInfo(s.user, s.server, s.profile)}, day_bounds(first, STEP, n),
                          STEP, long_idle_steps)
        for key, hours in rows.items():
            out.rows.setdefault(key, Hours()).add(hours)

    # one session's samples at a time
    for sid, times, utils in store.gpu_util_by_session(since - max_gap, until):
        for instance in instances.pop(sid, []):
            add(instance, [t.timestamp() for t in times], utils)
    for rest in instances.values():  # never sampled: held without a reading
        for instance in rest:
            add(instance, [], [])
    return out


def _session(instance: SessionInstance, samples: tuple[list[float], list[Util]], since: dt.datetime,
             until: dt.datetime, threshold: float, max_gap: dt.timedelta) -> tuple[float, int, Session] | None:
    """The instance's GPUs over the steps it ran in [since, until]: (the first step's instant,
    the steps, the session)."""
    s = instance.session
    first = grid_start(max(s.started, since))
    stop = instance.stopped.timestamp() if instance.stopped is not None else math.inf
    last = math.floor(until.timestamp() / STEP) * STEP
    if instance.stopped is not None:  # held at the instants before its stop
        last = min(last, math.ceil(stop / STEP) * STEP - STEP)
    if last < first:
        return None
    n = int((last - first) // STEP) + 1
    session = Session((s.id, s.started.isoformat()), 0, n, profile=s.profile, shared=s.gpu_shared)
    times, utils = samples
    # this instance's samples: from its start to its stop (an id used again is another instance)
    lo = bisect.bisect_left(times, s.started.timestamp())
    hi = bisect.bisect_left(times, stop) if instance.stopped is not None else len(times)
    gap = max_gap.total_seconds()
    for gpu in range(s.gpus):
        codes = bytearray([NO_VALUE]) * n
        for k in range(lo, hi):
            util = utils[k]
            if util is not None and len(util) != s.gpus:
                continue  # recorded against another instance's GPU count
            value = util[gpu] if util is not None else None
            code = NO_VALUE if value is None else USED if value >= threshold else IDLE
            t = times[k]
            end = min(times[k + 1] if k + 1 < hi else math.inf, t + gap, stop)
            a, b = _steps_in(t, end, first, n)
            codes[a:b] = bytes([code]) * (b - a)
            within = math.ceil((t - first) / STEP)  # the step whose (t_i - STEP, t_i] holds t
            if code == USED and 0 <= within < n:
                codes[within] = USED
        session.segments.append(Segment(0, bytes(codes)))
    return first, n, session


def _steps_in(t0: float, t1: float, first: float, n: int) -> tuple[int, int]:
    """The steps whose instants lie in [t0, t1)."""
    a = max(0, math.ceil((t0 - first) / STEP))
    b = min(n, max(a, math.ceil((t1 - first) / STEP)))
    return a, b
