"""What the admin page and the admin API show: the GPU sessions, the queue, stuck stops,
recent reclaims, the policy, the audit log, and the totals of the headline.

The totals are true at any moment: what is held, idle and waited for now comes from the
latest cycle; what was idle today and freed in the week comes from the service's record
(`usage.daily_usage`, the chart's own numbers), so a session reclaimed a minute ago still
counts in "idle today" and the reclaims that freed GPUs count from their stop on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..durations import format_duration
from ..policy.decider import IDLE_RULES
from ..service.status import CycleStatus, WaitingServer
from ..service.daily_hours import DayUsage, daily_usage
from ..settings.service_options import ServiceSettings
from ..signals.node_gpus import GpuCounts, summed
from ..store import Store
from ..store.reclaims import ReclaimRecord
from .render import audit_json, reclaim_json, session_json

ADMIN_PAGE_ROWS = 100  # the newest reclaims and audit records on the admin page (all: api/admin/history)
WEEK = dt.timedelta(days=7)


def totals(sessions: list[dict[str, Any]], queue: list[WaitingServer], week: list[DayUsage],
           reclaims: list[ReclaimRecord], capacity: GpuCounts | None) -> dict[str, Any]:
    """The headline's numbers: `sessions` (session_json of the GPU sessions) and `queue` as
    the latest cycle saw them, `week` the record's GPU-hours per day (today last),
    `reclaims` those begun in the week; `capacity` the cluster's GPUs by kind (None: not known).
    The GPUs held and waited for are by kind too, as the pages name them (node_gpus.in_words)."""
    stopped = [r for r in reclaims if r.outcome == "stopped" and r.gpus]
    return {"gpu_sessions": len(sessions), "gpus_held": sum(s["gpus"] for s in sessions),
            "gpus_held_by_kind": summed(s["kinds"] for s in sessions), "gpu_capacity": capacity,
            "gpus_idle": sum(s["gpus"] for s in sessions if s.get("rule") in IDLE_RULES),
            "gpu_hours_idle_today": round(week[-1].idle, 2) if week else 0.0,
            "waiting": len(queue), "gpus_waited_for": summed(q.kinds for q in queue),
            # the first in the queue gets the first GPU it can use
            "first_expected_free_at": queue[0].expected_free_at if queue else None,
            "reclaims_7d": len(stopped), "gpus_freed_7d": sum(r.gpus for r in stopped),
            "gpu_hours_freed_7d": round(sum(d.freed for d in week), 2)}


def admin_data(status: CycleStatus, store: Store | None, settings: ServiceSettings, t: dt.datetime) -> dict[str, Any]:
    """Everything the admin page shows, as the admin API writes it; `usage` (the week's
    `DayUsage`, oldest first) is the page's chart."""
    sessions = [session_json(s, t) for s in status.sessions.values() if s.gpus]
    sessions.sort(key=lambda s: (s["user"], s["server"]))
    records = store.reclaims(t - WEEK) if store else []
    week = daily_usage(store, t) if store else []
    reclaims = [reclaim_json(r, t) for r in records][::-1]
    stuck = [reclaim_json(r, t) for r in (store.stuck_reclaims() if store else [])]
    queue = [{**q.to_dict(), "waited": format_duration(q.waited_s)} for q in status.queue]
    p = settings.policy
    policy = {
        "gpu_idle_threshold_percent": p.gpu_idle_threshold,
        "never_used_warn_after": format_duration(p.never_used_warn_after.total_seconds()),
        "never_used_reclaim_after": format_duration(p.never_used_reclaim_after.total_seconds()),
        "idle_warn_after": format_duration(p.idle_warn_after.total_seconds()),
        "idle_reclaim_after": format_duration(p.idle_reclaim_after.total_seconds()),
        "warning_lead": format_duration(p.warning_lead.total_seconds()),
        "max_keepalive": format_duration(p.max_keepalive.total_seconds()),
    }
    if settings.rules.rules:
        policy["policy_rules"] = ", ".join(settings.rules.names) + " (first match wins)"
    return {"t": status.t, "skipped": status.skipped, "dry_run": settings.dry_run,
            "sessions": sessions, "queue": queue, "reclaims": reclaims[:ADMIN_PAGE_ROWS], "stuck": stuck,
            "totals": totals(sessions, status.queue, week, records, status.gpu_capacity),
            "policy": policy, "usage": week,
            "audit": [audit_json(a) for a in store.audit_log(t - WEEK, limit=ADMIN_PAGE_ROWS)] if store else []}
