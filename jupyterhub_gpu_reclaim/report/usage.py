"""The report's figures from the timelines: GPU-hours held, used, idle, without a reading and
idle in long stretches, per user, group, profile and UTC day; and the GPU queue (pods Pending
while asking for GPUs) and how long each waited."""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields

from ..durations import HOUR
from .history import IDLE, NO_VALUE, USED, Pod, PodInfo, Timelines

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


def day_bounds(t: Timelines) -> list[tuple[str, int, int]]:
    """(UTC day, first step, step after its last) of each day of the window."""
    out = []
    i = 0
    while i < t.steps:
        at = dt.datetime.fromtimestamp(t.start + i * t.step, dt.timezone.utc)
        next_day = (at.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)).timestamp()
        end = min(t.steps, max(i + 1, -(-round(next_day - t.start) // t.step)))
        out.append((at.date().isoformat(), i, end))
        i = end
    return out


def usage_rows(t: Timelines, pods: Mapping[Pod, PodInfo], profiles: Mapping[Pod, str],
               long_idle_steps: int) -> dict[tuple[str, str, str], Hours]:
    """Hours per (day, user, profile)."""
    h = t.step / HOUR.total_seconds()
    days = day_bounds(t)
    long_run = re.compile(rb"\x01{%d,}" % max(1, long_idle_steps))
    rows: dict[tuple[str, str, str], Hours] = {}
    for line in t.gpus.values():
        info = pods.get(line.pod)
        user = info.user if info else NO_USER
        profile = profiles.get(line.pod) or NO_PROFILE
        codes = bytes(line.codes)
        long_idle = bytearray(len(codes))
        for m in long_run.finditer(codes):
            long_idle[m.start():m.end()] = b"\x01" * (m.end() - m.start())
        for day, lo, hi in days:
            held = hi - lo - codes.count(0, lo, hi)
            if not held:
                continue
            row = rows.setdefault((day, user, profile), Hours())
            row.add(Hours(held * h, codes.count(USED, lo, hi) * h, codes.count(IDLE, lo, hi) * h,
                          codes.count(NO_VALUE, lo, hi) * h, long_idle.count(1, lo, hi) * h))
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


@dataclass(frozen=True)
class Wait:
    """One stretch a pod was Pending asking for GPUs."""

    pod: Pod
    user: str
    gpus: float
    start: float
    seconds: float


def waits(pending: Mapping[Pod, bytearray], requests: Mapping[Pod, float], pods: Mapping[Pod, PodInfo],
          start: float, step: int) -> list[Wait]:
    """The waits of pods that asked for GPUs: each run of Pending steps (one step of Pending
    counts as a step of waiting: the report errs toward the longer wait)."""
    out = []
    for pod, line in pending.items():
        gpus = requests.get(pod, 0.0)
        if gpus <= 0:
            continue
        info = pods.get(pod)
        for m in re.finditer(rb"\x01+", bytes(line)):
            out.append(Wait(pod, info.user if info else NO_USER, gpus, start + m.start() * step,
                            (m.end() - m.start()) * step))
    return out


def queue_summary(found: list[Wait]) -> dict:
    h = HOUR.total_seconds()
    lengths = sorted(w.seconds / h for w in found)
    return {
        "waits": len(found),
        "pods": len({w.pod for w in found}),
        "hours_waited": round(sum(lengths), 2),
        "gpu_hours_waited": round(sum(w.seconds * w.gpus for w in found) / h, 2),
        "median_wait_h": round(statistics.median(lengths), 2) if lengths else 0.0,
        "longest_wait_h": round(lengths[-1], 2) if lengths else 0.0,
    }
