"""The JSON API: `api/reclaims` (the spawner's resume priority) and the user and admin
endpoints under `api/`."""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tornado import web

from ..service.status import SPARK_WINDOW
from ..signals.hub import PAGINATION_MEDIA_TYPE
from ..timestamps import format_time, jsonable, utcnow
from ..service.daily_hours import daily_usage
from ..wording import KEEPS, LOSES
from ..store.reclaims import ReclaimRecord
from .base import Base, writes
from .inputs import BadInput, parse_days, parse_since, parse_until
from ..report.formats import csv_cell
from .render import audit_json, reclaim_json, session_json
from .way_back import start_again_url
from .whatif_runner import DEFAULT_SINCE, run_what_if

#: the page sizes of JupyterHub's paginated form of a list (signals.hub.PAGINATION_MEDIA_TYPE)
PAGE_DEFAULT, PAGE_MAX = 50, 200
USAGE_DAYS_DEFAULT, USAGE_DAYS_MAX = 7, 31


class ApiBase(Base):
    api = True

    def user_argument(self) -> str:
        """The `user=NAME` the request asks about: the caller's own, or anyone's for admins
        and hub services (the spawner); 400 without one, 403 for another user's."""
        user = self.get_argument("user", "")
        if not user:
            raise web.HTTPError(400, "user=NAME is required")
        caller: dict[str, Any] = self.current_user
        if caller.get("kind") != "service" and caller.get("name") != user and not self.is_admin:
            raise web.HTTPError(403, "users may read only their own")
        return user

    def pagination(self) -> tuple[int, int, bool]:
        """offset, limit and whether the caller asked for JupyterHub's paginated form (its
        Accept header); as the hub: limit up to 200, default 50 (200 without that header)."""
        accept = {part.strip().lower() for part in self.request.headers.get("Accept", "").split(",")}
        paginated = PAGINATION_MEDIA_TYPE in accept
        try:
            offset = int(self.get_argument("offset", "0"))
            limit = int(self.get_argument("limit", str(PAGE_DEFAULT if paginated else PAGE_MAX)))
        except ValueError:
            raise web.HTTPError(400, "offset and limit must be integers") from None
        if offset < 0 or limit < 0:
            raise web.HTTPError(400, "offset and limit must not be negative")
        return offset, min(max(limit, 1), PAGE_MAX), paginated

    def write_page(self, items: list, offset: int, limit: int, total: int) -> None:
        """JupyterHub's paginated model: {"items", "_pagination": {offset, limit, total, next}}."""
        nxt = None
        if offset + limit < total:
            url = urlsplit(self.request.full_url())
            query = [(k, v) for k, v in parse_qsl(url.query, keep_blank_values=True) if k not in ("offset", "limit")]
            query += [("offset", str(offset + limit)), ("limit", str(limit))]
            nxt = {"offset": offset + limit, "limit": limit, "url": urlunsplit(url._replace(query=urlencode(query)))}
        self.write_json({"items": items, "_pagination": {"offset": offset, "limit": limit, "total": total,
                                                         "next": nxt}})


class ReclaimsApi(ApiBase):
    """`GET api/reclaims?user=NAME&since=WHEN`: the user's reclaims since WHEN (an ISO 8601
    time or a duration back from now, default 1d), oldest first. GPUReclaimSpawner asks it,
    with a hub service's token, whether a user's last session was reclaimed (resume
    priority). A user may read their own; admins and hub services anyone's."""

    @web.authenticated
    def get(self) -> None:
        user = self.user_argument()
        try:
            since = parse_since(self.get_argument("since", "1d"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        assert self.ctx.store is not None
        self.write_json({"reclaims": [{
            "session": r.session, "server": r.session.split("/", 1)[1], "rule": r.rule,
            "t": format_time(r.t), "gpus": r.gpus, "outcome": r.outcome,
            "finished_at": format_time(r.finished_at) if r.finished_at else None,
        } for r in self.ctx.store.reclaims(since, user=user)]})


class QueueApi(ApiBase):
    """`GET api/queue?user=NAME`: the user's servers waiting for a GPU, with when a GPU is
    expected to be free for each (`expected_free_at`, null when no scheduled reclaim would
    free one). GPUReclaimSpawner asks it, with a hub service's token, for the spawn
    progress. A user may read their own; admins and hub services anyone's."""

    @web.authenticated
    def get(self) -> None:
        user = self.user_argument()
        self.write_json({"t": self.ctx.controls.status().t,
                         "queue": [q.to_dict() for q in self.ctx.controls.waiting_of(user)],
                         # the spawn form's cap (GPUReclaimSpawner has no setting of its own)
                         "max_keepalive_seconds": self.ctx.max_keepalive.total_seconds()})


class SessionsApi(ApiBase):
    @web.authenticated
    def get(self) -> None:
        t = utcnow()
        self.write_json({"user": self.user_name, "t": self.ctx.controls.status().t,
                         "dry_run": self.ctx.settings.dry_run,
                         "max_keepalive_seconds": self.ctx.max_keepalive.total_seconds(),
                         "spark_window_seconds": SPARK_WINDOW.total_seconds(),
                         "keeps": KEEPS, "loses": LOSES,
                         "sessions": [session_json(s, t) for s in self.my_sessions().values()],
                         "waiting": [q.to_dict() for q in self.my_queue()],
                         # with each its Start again (the JupyterLab extension's, as its server stops)
                         "reclaims": [{**reclaim_json(r, t), "again": start_again_url(self.ctx.hub_prefix, r.session, r.ran)}
                                      for r in self.user_reclaims()]})


class IntentApi(ApiBase):
    @writes
    def put(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.own_session(sid)
        body = self.json_body()
        try:
            until = self.ctx.controls.keep_alive(self.user_name, sid, parse_until(body, self.ctx.max_keepalive))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        self.write_json({"session": sid, "intent_until": until})

    @writes
    def delete(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.own_session(sid)
        self.write_json({"session": sid, "cleared": self.ctx.controls.clear_intent(self.user_name, sid)})


class StopApi(ApiBase):
    @writes
    def post(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.ctx.controls.stop(self.user_name, sid)
        self.write_json({"session": sid, "stopping": True}, 202)


class AdminCandidatesApi(ApiBase):
    COLUMNS = ("user", "server", "profile", "node", "gpus", "gpu_type", "gpu_shared", "util_now", "util_mean",
               "util_max", "mem_mib", "kernels_busy", "kernels_idle", "kernel_last_activity", "hub_last_activity", "state",
               "rule", "reason", "warned_at", "reclaim_at", "intent_until", "exempt_until", "policy_rule")

    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        data = self.admin_data()
        fmt = self.get_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise web.HTTPError(400, f"format must be json or csv, not {fmt!r}")
        if fmt == "json":
            self.write_json({"t": data["t"], "dry_run": data["dry_run"], "candidates": data["sessions"],
                             "totals": data["totals"]})
            return
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(self.COLUMNS)
        for s in data["sessions"]:
            k = s.get("kernels") or {}
            row = {**s, "kernels_busy": k.get("busy"), "kernels_idle": k.get("idle"),
                   "kernel_last_activity": k.get("last_activity"), "state": s["state_text"]}
            w.writerow([csv_cell(" ".join(f"{x:.1f}" if isinstance(x, float) else str(x) for x in v)
                                 if isinstance(v, list) else jsonable(v)) for v in (row.get(c) for c in self.COLUMNS)])
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", 'attachment; filename="gpu-reclaim-candidates.csv"')
        self.finish(out.getvalue())


class AdminQueueApi(ApiBase):
    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        data = self.admin_data()
        self.write_json({"t": data["t"], "queue": data["queue"]})


class AdminUsageApi(ApiBase):
    """`GET api/admin/usage?days=7`: GPU-hours held, idle, freed and waited for per UTC
    day, oldest first (the admin page's chart; `usage.daily_usage`)."""

    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        try:
            n = parse_days(self.get_argument("days", str(USAGE_DAYS_DEFAULT)), USAGE_DAYS_MAX)
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        days = daily_usage(self.ctx.store, utcnow(), n) if self.ctx.store is not None else []
        self.write_json({"days": [jsonable(dataclasses.asdict(d)) for d in days]})


class AdminHistoryApi(ApiBase):
    """`GET api/admin/history?since=7d`: reclaims and audit records, newest first, a page at
    a time (`offset`, `limit`; with JupyterHub's pagination Accept header, its paginated
    model; without it, the page as {"reclaims", "stuck", "audit"})."""

    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        try:
            since = parse_since(self.get_argument("since", "7d"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        offset, limit, paginated = self.pagination()
        store = self.ctx.store
        assert store is not None
        t = utcnow()
        total, page = store.history(since, offset=offset, limit=limit)
        records = [("reclaim", reclaim_json(r, t)) if isinstance(r, ReclaimRecord) else ("audit", audit_json(r))
                   for r in page]
        if paginated:
            self.write_page([{"kind": kind, **r} for kind, r in records], offset, limit, total)
            return
        self.write_json({"reclaims": [r for kind, r in records if kind == "reclaim"],
                         "stuck": [reclaim_json(r, t) for r in store.stuck_reclaims()],
                         "audit": [r for kind, r in records if kind == "audit"]})


class AdminActionsApi(ApiBase):
    @web.authenticated
    def post(self) -> None:
        self.require_admin()
        body = self.json_body()
        try:
            message = self.ctx.controls.admin_action(self.actor, body.get("action"), body.get("session"),
                                                     body.get("hours"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        self.write_json({"ok": True, "message": message})


class AdminWhatIfApi(ApiBase):
    """`POST api/admin/whatif` {"since": "7d", "until": optional, "override": {setting: value}}:
    the recorded history under the live policy and under the override (docs/api.md)."""

    @web.authenticated
    async def post(self) -> None:
        self.require_admin()
        body = self.json_body()
        unknown = sorted(set(body) - {"since", "until", "override"})
        if unknown:
            raise web.HTTPError(400, f"unknown field {unknown[0]!r}: give since, until and override")
        try:
            result = await run_what_if(self, body.get("since", DEFAULT_SINCE), body.get("until"),
                                       body.get("override"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        self.write_json(result.to_dict())
