"""The report's figures from the sessions: GPU-hours held, used, idle, without a reading and
idle in long stretches, per user, group, profile and UTC day; and the GPU queue (pods Pending
while asking for GPUs: waiting for a GPU, or starting) and how long each waited."""

from __future__ import annotations

import datetime as dt
import re
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields

from ..durations import HOUR
from .timelines import IDLE, NO_VALUE, USED, Pod, PodInfo
from .runs import Asked, Run, gpus_asked, within
from .sessions import Session

NO_USER = "(not a hub user's pod)"
NO_PROFILE = "(profile unknown)"
NO_GROUP = "(no group)"
DAY_S = 86400


@dataclass
class Hours:
    """GPU-hours, each GPU (a MIG instance, a time-sliced replica) counted as one."""

    held: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    no_reading: float = 0.0
    idle_long: float = 0.0  # idle in stretches of at least the long-idle span

    def add(self, other: Hours) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in asdict(self).items()}


def day_bounds(start: float, step: int, steps: int) -> list[tuple[str, int, int]]:
    """(UTC day, first step, step after its last) of each day of `steps` steps of `step`
    seconds, step i counting on the day of `start + i * step` (the report's steps: the day
    each step's time begins, start being its first step's beginning)."""
    out = []
    i = 0
    while i < steps:
        at = dt.datetime.fromtimestamp(start + i * step, dt.timezone.utc)
        next_day = (at.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)).timestamp()
        end = min(steps, max(i + 1, -(-round(next_day - start) // step)))
        out.append((at.date().isoformat(), i, end))
        i = end
    return out


def usage_rows(sessions: Iterable[Session], pods: Mapping[Pod, PodInfo], days: list[tuple[str, int, int]],
               step: int, long_idle_steps: int) -> dict[tuple[str, str, str], Hours]:
    """Hours per (day, user, profile) of the sessions, each GPU counted, idle in long
    stretches counted in each GPU's own stretches."""
    h = step / HOUR.total_seconds()
    long_run = re.compile(rb"\x01{%d,}" % max(1, long_idle_steps))
    starts = [lo for _, lo, _ in days]
    rows: dict[tuple[str, str, str], Hours] = {}
    for session in sessions:
        info = pods.get(session.pod)
        user = info.user if info else NO_USER
        profile = session.profile or NO_PROFILE
        for seg in session.segments:
            codes = seg.codes
            long_idle = bytearray(len(codes))
            for m in long_run.finditer(codes):
                long_idle[m.start():m.end()] = b"\x01" * (m.end() - m.start())
            for k in range(max(0, bisect_right(starts, seg.first) - 1), len(days)):
                day, lo, hi = days[k]
                if lo >= seg.end:
                    break
                lo, hi = max(lo, seg.first) - seg.first, min(hi, seg.end) - seg.first
                held = hi - lo - codes.count(0, lo, hi)
                if held <= 0:
                    continue
                n = h * seg.gpus
                row = rows.setdefault((day, user, profile), Hours())
                row.add(Hours(held * n, codes.count(USED, lo, hi) * n, codes.count(IDLE, lo, hi) * n,
                              codes.count(NO_VALUE, lo, hi) * n, long_idle.count(1, lo, hi) * n))
    return rows


def totals_by(rows: Mapping[tuple[str, str, str], Hours], key) -> dict[str, Hours]:
    out: dict[str, Hours] = {}
    for k, hours in rows.items():
        for name in key(k):
            out.setdefault(name, Hours()).add(hours)
    return out


def groups_of(users: Iterable[str], groups: Mapping[str, list[str]] | None) -> dict[str, list[str]]:
    """Each user's groups (sorted) from the hub's {group: members}; NO_GROUP when none."""
    member: dict[str, list[str]] = {u: [] for u in users}
    for group, names in (groups or {}).items():
        for name in names:
            if name in member:
                member[name].append(group)
    return {u: sorted(g) or [NO_GROUP] for u, g in member.items()}


GPU, START = "gpu", "start"  # a wait for a GPU (unschedulable), a start (scheduled: image pull, container start)


@dataclass(frozen=True)
class Wait:
    """One stretch a pod was Pending asking for GPUs, all of it waiting for a GPU (`kind`
    GPU: kube-state-metrics shows it unschedulable) or starting (START: scheduled, Pending
    while its image is pulled and its containers start)."""

    pod: Pod
    user: str
    gpus: float
    start: float
    seconds: float
    kind: str = GPU


def waits(pending: Mapping[Pod, list[Run]], unschedulable: Mapping[Pod, list[Run]],
          requests: Mapping[Pod, Asked],
          pods: Mapping[Pod, PodInfo], start: float, step: int) -> list[Wait]:
    """The waits of pods that asked for GPUs: each stretch of Pending steps, split where the
    pod stops (or starts) being unschedulable (one step of Pending counts as a step of
    waiting: the report errs toward the longer wait)."""
    out: list[Wait] = []
    for pod, runs in pending.items():
        info = pods.get(pod)
        waiting = unschedulable.get(pod, [])
        for a, b in runs:
            gpus = gpus_asked(requests.get(pod, {}), a, b)  # what this instance asked for
            if gpus <= 0:
                continue
            cuts = sorted({a, b} | {x for run in waiting for x in run if a < x < b})
            pieces: list[tuple[int, int, str]] = []
            for x, y in zip(cuts, cuts[1:], strict=False):
                kind = GPU if within(waiting, x, y) else START
                if pieces and pieces[-1][2] == kind:  # two stretches of the same kind: one wait
                    x = pieces.pop()[0]
                pieces.append((x, y, kind))
            out += [Wait(pod, info.user if info else NO_USER, gpus, start + x * step, (y - x) * step, kind)
                    for x, y, kind in pieces]
    return out


def queue_summary(found: list[Wait]) -> dict:
    """The waits for a GPU summed up, and the starts apart (`starting`)."""
    gpu = [w for w in found if w.kind == GPU]
    return {**_summary(gpu), "gpu_hours_waited": round(sum(w.seconds * w.gpus for w in gpu) / HOUR.total_seconds(), 2),
            "starting": _summary([w for w in found if w.kind == START])}


def _summary(found: list[Wait]) -> dict:
    h = HOUR.total_seconds()
    lengths = sorted(w.seconds / h for w in found)
    return {
        "waits": len(found),
        "pods": len({w.pod for w in found}),
        "hours_waited": round(sum(lengths), 2),
        "median_wait_h": round(statistics.median(lengths), 2) if lengths else 0.0,
        "longest_wait_h": round(lengths[-1], 2) if lengths else 0.0,
    }
