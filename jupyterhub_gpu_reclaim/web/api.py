"""The JSON API: `api/reclaims` (hub token) and the user and admin endpoints under `api/`."""

from __future__ import annotations

import csv
import io
from typing import Any

from jupyterhub.services.auth import HubAuth, HubAuthenticated
from tornado import web

from ..store import Store
from ..trace import format_time
from .base import Base
from .inputs import BadInput, parse_since, parse_until
from .render import csv_cell, iso, now, reclaim_json


class ReclaimsHandler(HubAuthenticated, web.RequestHandler):
    """`GET api/reclaims?user=NAME&since=WHEN`: the user's reclaims since WHEN (an ISO 8601
    time or a duration back from now, default 1d), newest last. GPUReclaimSpawner asks it
    whether a user's last session was reclaimed (resume priority)."""

    def initialize(self, store: Store, hub_auth: HubAuth) -> None:
        self.store = store
        self.hub_auth = hub_auth

    def get_login_url(self) -> str:
        raise web.HTTPError(403, "a hub token with access to this service is required")

    @web.authenticated
    def get(self) -> None:
        caller: dict[str, Any] = self.current_user
        user = self.get_argument("user", "")
        if not user:
            raise web.HTTPError(400, "user=NAME is required")
        if caller.get("kind") == "user" and caller.get("name") != user and not caller.get("admin"):
            raise web.HTTPError(403, "users may read only their own reclaims")
        try:
            since = parse_since(self.get_argument("since", "1d"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        records = [r for r in self.store.reclaims(since) if r.session.split("/", 1)[0] == user]
        self.write({"reclaims": [{
            "session": r.session, "server": r.session.split("/", 1)[1], "rule": r.rule,
            "t": format_time(r.t), "gpus": r.gpus, "outcome": r.outcome,
            "finished_at": format_time(r.finished_at) if r.finished_at else None,
        } for r in records]})


class ApiBase(Base):
    api = True


class SessionsApi(ApiBase):
    @web.authenticated
    def get(self) -> None:
        self.write_json({"user": self.user_name, "t": self.ctx.snapshot()["t"],
                         "dry_run": self.ctx.dry_run,
                         "max_keepalive_seconds": self.ctx.max_keepalive.total_seconds(),
                         "sessions": [self.session_json(s) for s in self.my_sessions().values()],
                         "waiting": self.my_queue(), "reclaims": self.user_reclaims()})


class IntentApi(ApiBase):
    @web.authenticated
    def put(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.own_session(sid)
        body = self.json_body()
        try:
            until = self.do_keepalive(sid, parse_until(body, self.ctx.max_keepalive))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        self.write_json({"session": sid, "intent_until": until})

    @web.authenticated
    def delete(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.own_session(sid)
        self.write_json({"session": sid, "cleared": self.do_clear_intent(sid, self.user_name)})


class StopApi(ApiBase):
    @web.authenticated
    def post(self, user: str, server: str) -> None:
        sid = f"{user}/{server}"
        self.do_stop(sid)
        self.write_json({"session": sid, "stopping": True}, 202)


class AdminCandidatesApi(ApiBase):
    COLUMNS = ("user", "server", "profile", "node", "gpus", "util_now", "util_mean", "util_max", "mem_mib",
               "kernels_busy", "kernels_idle", "kernel_last_activity", "hub_last_activity", "state",
               "rule", "reason", "warned_at", "reclaim_at", "intent_until", "exempt_until")

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
                                 if isinstance(v, list) else iso(v)) for v in (row.get(c) for c in self.COLUMNS)])
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", 'attachment; filename="gpu-reclaim-candidates.csv"')
        self.finish(out.getvalue())


class AdminQueueApi(ApiBase):
    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        self.write_json({"t": self.ctx.snapshot()["t"], "queue": self.admin_data()["queue"]})


class AdminHistoryApi(ApiBase):
    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        try:
            since = parse_since(self.get_argument("since", "7d"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        store = self.ctx.store
        assert store is not None
        t = now()
        self.write_json({"reclaims": [reclaim_json(r, t) for r in store.reclaims(since)],
                         "stuck": [reclaim_json(r, t) for r in store.stuck_reclaims()],
                         "audit": store.audit_log(since)})


class AdminActionsApi(ApiBase):
    @web.authenticated
    def post(self) -> None:
        self.require_admin()
        body = self.json_body()
        try:
            message = self.do_admin_action(body.get("action"), body.get("session"), body.get("hours"))
        except BadInput as e:
            raise web.HTTPError(400, str(e)) from None
        self.write_json({"ok": True, "message": message})
