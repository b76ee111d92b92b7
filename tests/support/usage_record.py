"""A service's record for the usage report's tests: GPU sessions with their utilization as a
function of time, written into a store cycle by cycle as the service writes it (an outage
leaves a gap), and the report's figures computed from the same samples step by step, here,
without the product's code."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jupyterhub_gpu_reclaim.policy.observations import Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.store import Store

UTC = dt.timezone.utc
STEP = 60  # the report's step
CYCLE = dt.timedelta(seconds=60)
OFFSET = dt.timedelta(seconds=30)  # the cycles sit between the steps' instants
FIELDS = ("held", "used", "idle", "no_reading", "idle_long")
#: names a user chooses, as a spreadsheet or a page would run them
HOSTILE_USER = "=cmd|'calc'!A0"
HOSTILE_GROUP = "<script>alert(1)</script>"
HOSTILE_PROFILE = "@SUM(1+1)<b>"


@dataclass(frozen=True)
class Recorded:
    """A session instance from `started` to `stopped` (None: it runs), with `util(t)` its
    GPUs' utilization at t (None for no data), sampled at each cycle outside `outages`."""

    sid: str
    gpus: int
    started: dt.datetime
    stopped: dt.datetime | None
    util: Callable[[dt.datetime], tuple[float | None, ...] | None]
    profile: str = ""
    groups: frozenset[str] = frozenset()
    outages: tuple[tuple[dt.datetime, dt.datetime], ...] = ()

    @property
    def session(self) -> Session:
        user, _, server = self.sid.partition("/")
        return Session(id=self.sid, user=user, server=server, gpus=self.gpus, started=self.started,
                       profile=self.profile, groups=self.groups)

    def samples(self, until: dt.datetime) -> list[tuple[dt.datetime, tuple[float | None, ...] | None]]:
        """The cycles' samples: every CYCLE from its start (+ OFFSET) to its stop or `until`."""
        out, t = [], self.started + OFFSET
        end = min(self.stopped or until, until)
        while t <= end and (self.stopped is None or t < self.stopped):
            if not any(a <= t < b for a, b in self.outages):
                out.append((t, self.util(t)))
            t += CYCLE
        return out


def fill(store: Store, sessions: Iterable[Recorded], until: dt.datetime,
         pending: Callable[[dt.datetime], int] = lambda t: 0) -> None:
    """Write the sessions' cycles into the store as the service does (each cycle's samples,
    the instances it met, `pending(t)` GPUs requested by pods waiting), and each stop."""
    cycles: dict[dt.datetime, list[tuple[Recorded, tuple[float | None, ...] | None]]] = {}
    for r in sessions:
        for t, util in r.samples(until):
            cycles.setdefault(t, []).append((r, util))
    for t in sorted(cycles):
        store.record_observations(t, [SessionSample(r.sid, Sample(t=t, gpu_util=util)) for r, util in cycles[t]], pending(t),
                                  [r.session for r, _ in cycles[t]])
    for r in sessions:
        if r.stopped is not None:
            store.session_stopped(r.sid, r.stopped)


def reclaimed(store: Store, sid: str, stopped: dt.datetime, outcome: str, gpus: int) -> None:
    """A reclaim of `sid`'s `gpus` GPUs, recorded as the service records it, finished at `stopped`."""
    reclaim = store.begin_reclaim(sid, "gpu-idle", stopped - dt.timedelta(seconds=30), {}, gpus)
    assert reclaim is not None
    store.finish_reclaim(reclaim, stopped, outcome)  # type: ignore[arg-type]


def expected_rows(sessions: Iterable[Recorded], since: dt.datetime, now: dt.datetime, threshold: float,
                  long_idle_steps: int, gap: dt.timedelta) -> dict[tuple[str, str, str], dict[str, float]]:
    """(day, user, profile) -> GPU-hours from the samples: at each step's instant from `since`
    to `now` a GPU is held while its instance runs; it reads what the latest sample read (if
    less than `gap` old), used when a sample in the step reached `threshold`."""
    rows: dict[tuple[str, str, str], dict[str, float]] = {}
    h = STEP / 3600
    for r in sessions:
        samples = r.samples(now)
        user = r.session.user
        for gpu in range(r.gpus):
            states: list[tuple[dt.datetime, str]] = []
            t = dt.datetime.fromtimestamp(math.ceil(max(r.started, since).timestamp() / STEP) * STEP, UTC)
            while t <= now and (r.stopped is None or t < r.stopped):
                before = [(ts, u) for ts, u in samples if ts <= t]
                state = "no_reading"
                if before and t - before[-1][0] < gap:
                    value = before[-1][1][gpu] if before[-1][1] is not None else None
                    state = "no_reading" if value is None else "used" if value >= threshold else "idle"
                if any(t - dt.timedelta(seconds=STEP) < ts <= t and u is not None and u[gpu] is not None
                       and u[gpu] >= threshold for ts, u in samples):
                    state = "used"
                states.append((t, state))
                t += dt.timedelta(seconds=STEP)
            text = "".join(s[0] for _, s in states)  # u, i, n
            long_idle = {i for m in re.finditer("i{%d,}" % long_idle_steps, text) for i in range(m.start(), m.end())}
            for i, (t, state) in enumerate(states):
                row = rows.setdefault((t.date().isoformat(), user, r.profile or "(profile unknown)"),
                                      dict.fromkeys(FIELDS, 0.0))
                row["held"] += h
                row[state] += h
                row["idle_long"] += h if i in long_idle else 0.0
    return {k: {f: round(v, 2) for f, v in row.items()} for k, row in rows.items()}
