"""The usage report of the admin page: the report's figures (report/: GPU-hours held, used,
idle, idle in long stretches and without a reading, per user, group, profile and UTC day)
for the last N days, from the service's own record (service/recorded_usage.py) for the days
it covers, and from Prometheus's history (report/run.read_history, the service's
--prometheus-url) for the days before; each day says its source. With each day its GPU queue
and the GPU-hours freed: the record's (service/daily_hours.py, as the admin page's week counts
them: each cycle's waiting GPUs, the reclaims) or Prometheus's (the command's queue, and its
estimate of what the policy would have freed, labelled so).

The record covers the days from the first whole UTC day after its oldest observation;
Prometheus the days before (the day the record begins included: it holds the whole day). When
Prometheus is not configured or cannot be read, the record covers what it has of its first
day and the days before are left empty, and the report says why. Prometheus is read and its
figures computed in a process of its own (`child_process`: the memory goes with it), within
`PROMETHEUS_TIMEOUT` in all and `DAYS_MAX` days, only the GPU series of
--prometheus-gpu-matchers, and its answer for the past kept for `CACHE_TTL` (past days do not
change); the record is read in a thread: the service's loop and its cycles go on. One report
at a time."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import datetime as dt
import time
from typing import Any

from ..child_process import ChildFailed, OverBudget, call_in_child
from ..durations import DAY
from ..policy.config import PolicyConfig
from ..report.prometheus_range import ReportError
from ..report.history_part import PrometheusPart, read_part
from ..report.run import ReportRequest, counted_by, long_idle_steps, usage_tables
from ..report.formats import HOURS, HOURS_COLUMNS
from ..report.usage import Hours, groups_of
from ..service.recorded_usage import STEP, RecordedUsage, recorded_usage
from ..service.daily_hours import MAX_STEP, day_bounds, freed_by_day, waiting_by_day
from ..settings.service_options import ServiceSettings
from ..signals.http_source import hide_password
from ..store import Store
from ..timestamps import format_time

DAYS_DEFAULT, DAYS_MAX = 7, 31  # the period; DAYS_MAX bounds the days asked of Prometheus too
DAYS_OFFERED = (7, 14, 30)
PROMETHEUS_TIMEOUT = 60.0  # seconds for all of Prometheus's part
PROMETHEUS_REQUEST_TIMEOUT = 30.0  # seconds for each of its requests
COMPUTE_TIMEOUT = 60.0  # seconds more for its process: starting, and computing the figures read
CACHE_TTL = 600.0  # seconds a Prometheus answer for past days is kept
CACHE_SIZE = 8
#: where a day's figures come from, and how the page names it
RECORD, PROMETHEUS, NONE = "record", "prometheus", "none"
SOURCES = {RECORD: "the service's record", PROMETHEUS: "Prometheus", NONE: "no data"}
PROMETHEUS_NOT_SET = ("No Prometheus is configured (--prometheus-url), so the days before the service's record "
                      "are empty.")
#: the per-day CSV's columns after the day, its source and its GPU-hours (the command's names where it has them)
DAY_COLUMNS = ("gpu_hours_freed", "freed_is_estimate", "gpu_hours_waited", "waits", "longest_wait_h", "starts",
               "longest_start_h")
PROMETHEUS_FAILED = "Prometheus could not be read, so the days before the service's record are empty: {error}"
#: whose settings the estimate of Prometheus's days applies (its idle threshold and GPU rules)
LIVE_POLICY = "the service's policy"
WAITS_FROM_PROMETHEUS = ("Each pod's waits (how many, how long) are known on Prometheus's days only (kube-state-metrics' "
                         "Pending pods: a wait while unschedulable, for a GPU; a start once scheduled, while the image "
                         "is pulled and the containers start); the service records the GPUs pods wait for at each "
                         "cycle, not who waits.")

_cache: dict[tuple, tuple[float, PrometheusPart]] = {}
_one_at_a_time = asyncio.Lock()  # a second request waits, then finds Prometheus's answer cached


def day_of(t: dt.datetime) -> dt.datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclasses.dataclass(frozen=True)
class Period:
    """The report's days: `days` UTC days up to `now`, today's first hours included."""

    now: dt.datetime
    days: int

    def __post_init__(self) -> None:
        if not 1 <= self.days <= DAYS_MAX:
            raise ValueError(f"days: from 1 to {DAYS_MAX}, not {self.days}")

    def bounds(self) -> list[tuple[dt.datetime, dt.datetime]]:
        """Each day's start and end (`now` for today's), as the admin page's week counts them."""
        return day_bounds(self.now, self.days)

    @property
    def first(self) -> dt.datetime:
        return self.bounds()[0][0]

    def day_starts(self) -> list[dt.datetime]:
        return [start for start, _ in self.bounds()]


def record_begins(store: Store, now: dt.datetime) -> tuple[dt.datetime | None, dt.datetime]:
    """When the record's oldest observation was made (None: none yet), and the first UTC day
    it covers whole (`now` when it has none: Prometheus covers the whole period)."""
    oldest = store.first_observation()
    if oldest is None:
        return None, now
    return oldest, day_of(oldest) if day_of(oldest) == oldest else day_of(oldest) + DAY


async def prometheus_part(url: str, matchers: str, pod_label: Any, since: dt.datetime, until: dt.datetime,
                          config: PolicyConfig) -> PrometheusPart:
    """The history's part for the steps from `since` to `until` (ReportError when Prometheus
    cannot be read in time), computed in a child process (`child_process`: the memory a big
    history takes goes with it, and the service's loop and pages go on); an answer of the
    last CACHE_TTL from the cache."""
    key = (url, matchers, pod_label, since, until, config.gpu_idle_threshold, config.idle_reclaim_after)
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    request = ReportRequest(url, since, until, STEP, gpu_matchers=matchers, pod_label=pod_label,
                            timeout=PROMETHEUS_REQUEST_TIMEOUT)
    budget = PROMETHEUS_TIMEOUT + COMPUTE_TIMEOUT
    try:
        answer = await call_in_child(read_part, request, config, LIVE_POLICY, PROMETHEUS_TIMEOUT, budget_s=budget,
                                     name="gpu-reclaim usage report", what="the reading of Prometheus's days",
                                     expected=(ReportError,))
    except OverBudget:
        raise ReportError(f"no answer within {budget:g} s") from None
    except ChildFailed as e:  # the page goes on with the store's days, and says why Prometheus's are missing
        raise ReportError(str(e)) from None
    for k, (expires, _) in list(_cache.items()):
        if expires <= now or len(_cache) >= CACHE_SIZE:
            del _cache[k]
    _cache[key] = (now + CACHE_TTL, answer)
    return answer


async def usage_report(store: Store, settings: ServiceSettings, now: dt.datetime, days: int) -> dict:
    """The report of the last `days` UTC days up to `now`, as one JSON-able dict: the
    command's figures (`counted_by`, `usage_tables`), each day and row with its source
    (`SOURCES`), the sources, and notes. One at a time in this process."""
    async with _one_at_a_time:
        return await _usage_report(store, settings, now, days)


async def _usage_report(store: Store, settings: ServiceSettings, now: dt.datetime, days: int) -> dict:
    config = settings.policy
    period = Period(now, days)
    oldest, whole = await asyncio.to_thread(record_begins, store, now)
    source = {day.date().isoformat(): NONE for day in period.day_starts()}
    rows: dict[tuple[str, str, str], Hours] = {}
    notes: list[str] = []
    found: PrometheusPart | None = None
    url = settings.prometheus_url
    record_since = max(period.first, whole)
    before = min(whole, now)  # Prometheus's part ends there
    if period.first < before and not url:
        notes.append(PROMETHEUS_NOT_SET)
    elif period.first < before:
        try:
            found = await prometheus_part(url, settings.prometheus_gpu_matchers, settings.prometheus_pod_label,
                                          period.first, before, config)
        except ReportError as e:
            notes.append(PROMETHEUS_FAILED.format(error=e))
        else:
            rows.update({key: dataclasses.replace(hours) for key, hours in found.rows.items()})  # the cache's stay
            notes += found.notes
            for day in source:
                if dt.date.fromisoformat(day) < before.date() or before == now:
                    source[day] = PROMETHEUS
    if oldest is not None and source[period.first.date().isoformat()] != PROMETHEUS:
        record_since = max(period.first, day_of(oldest))  # what the record has of its first day too
    if oldest is not None and record_since <= now:
        max_gap = max(MAX_STEP, 2 * settings.cycle_interval)
        recorded: RecordedUsage = await asyncio.to_thread(
            recorded_usage, store, record_since, now, config.gpu_idle_threshold,
            long_idle_steps(config, STEP), max_gap)
        for key, hours in recorded.rows.items():
            rows.setdefault(key, Hours()).add(hours)
        for day in source:
            if dt.date.fromisoformat(day) >= record_since.date():
                source[day] = RECORD
        groups = {group: sorted(names) for group, names in recorded.groups.items()}
    else:
        groups = {}
    users = sorted({user for _, user, _ in rows})
    report = {
        "source": {"record": format_time(oldest) if oldest else None,
                   "prometheus": hide_password(url) if url else None, "groups": "the service's record"},
        "window": {"since": format_time(period.first), "until": format_time(now), "step_s": STEP, "days": "UTC"},
        **counted_by(config),
        **usage_tables(rows, groups_of(users, groups), True),
        "notes": notes,
    }
    report["by_day"] = _days(report["by_day"], source, found,
                             await asyncio.to_thread(_recorded_queue_and_freed, store, period))
    for row in report["rows"]:
        row["source"] = source.get(row["day"], NONE)
    report["queue"] = found.queue if found else None
    report["policy_estimate"] = found.estimate if found else None
    on_record = [d for d in report["by_day"] if d["source"] == RECORD]
    report["recorded"] = {k: round(sum(d[k] for d in on_record), 2) for k in ("gpu_hours_waited", "gpu_hours_freed")}
    return report


def _recorded_queue_and_freed(store: Store, period: Period) -> dict[str, tuple[float, float]]:
    """{day: (GPU-hours waited for, GPU-hours freed by reclaims)} from the service's record, as
    the admin page's week counts them (service/daily_hours.py)."""
    bounds = period.bounds()
    waiting, freed = waiting_by_day(store, bounds, period.now), freed_by_day(store, bounds, period.now)
    return {start.date().isoformat(): (round(waiting[i], 2), round(freed[i], 2))
            for i, (start, _) in enumerate(bounds)}


def _days(by_day: list[dict], source: dict[str, str], found: PrometheusPart | None,
          recorded: dict[str, tuple[float, float]]) -> list[dict]:
    """Each day of the period with its source, its GPU-hours, and its queue and freed hours:
    the record's (waited for at each cycle; freed by the service's reclaims) or Prometheus's
    (the command's queue; the policy estimate, `freed_is_estimate`)."""
    hours = {r["day"]: r for r in by_day}
    queue = {q["day"]: q for q in found.queue["by_day"]} if found else {}
    estimated = {e["day"]: e["gpu_hours_freed"] for e in found.estimate["by_day"]} if found else {}
    out = []
    for day, src in source.items():
        row = {**(hours.get(day) or {"day": day, **Hours().rounded()}), "source": src}
        if src == RECORD:
            waited, freed = recorded[day]
            row.update(gpu_hours_waited=waited, waits=None, longest_wait_h=None, starts=None, longest_start_h=None,
                       gpu_hours_freed=freed, freed_is_estimate=False)
        else:
            q = queue.get(day, {})
            starting = q.get("starting", {})
            known = src == PROMETHEUS
            row.update(gpu_hours_waited=q.get("gpu_hours_waited", 0.0),
                       waits=q.get("waits", 0) if known else None,
                       longest_wait_h=q.get("longest_wait_h", 0.0) if known else None,
                       starts=starting.get("waits", 0) if known else None,
                       longest_start_h=starting.get("longest_wait_h", 0.0) if known else None,
                       gpu_hours_freed=estimated.get(day, 0.0), freed_is_estimate=known)
        out.append(row)
    return out


def days_csv(report: dict) -> str:
    """One row per day: its source, GPU-hours (the command's --csv columns), freed and queue
    (`DAY_COLUMNS`; empty where the day's source does not know the figure)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["day", "source", *HOURS_COLUMNS, *DAY_COLUMNS])
    for d in report["by_day"]:
        writer.writerow([d["day"], d["source"], *(d[k] for k in HOURS), *(d[c] for c in DAY_COLUMNS)])
    return out.getvalue()
