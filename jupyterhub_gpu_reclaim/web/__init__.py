"""The service's web server (tornado, as JupyterHub and its services use): pages, JSON API,
/metrics and /health.

As a hub-managed service with a `url`, JupyterHub routes `/services/<name>/` to it and
sets JUPYTERHUB_SERVICE_URL (where to listen) and JUPYTERHUB_SERVICE_PREFIX (the path
prefix the proxy keeps). Every page is served under the prefix, and `/metrics` also at
the root so Prometheus can scrape the pod directly.

`/metrics` carries counts only (no user names), like JupyterHub's own metrics with
`authenticate_prometheus = False`.

Everything else needs the hub's say: a hub token (`Authorization: token …`, checked with
HubAuth) or the service's own login cookie, set by JupyterHub's OAuth at
`<prefix>oauth_callback`. Writes with the cookie need the service's XSRF token (the `_xsrf`
field of its forms, or the `X-XSRFToken` header); token-authenticated writes do not. Users
see and act on their own sessions only (another user's session is answered 404); the admin
pages and API need the hub's admin flag or the `admin_scope` (403 otherwise). See
docs/api.md for the API and docs/api.yaml for its OpenAPI description.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import logging
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from jupyterhub.services.auth import HubAuth, HubAuthenticated, HubOAuthCallbackHandler, HubOAuthenticated
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado import web
from tornado.httpserver import HTTPServer

from ..durations import parse_duration
from ..metrics import Metrics
from ..policy import IDLE_RULES, PolicyConfig
from ..signals.base import parse_time
from ..store import Store
from ..trace import format_time

log = logging.getLogger("jupyterhub_gpu_reclaim.web")

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
#: for `c.JupyterHub.template_paths`: the hub templates showing reclaim state (docs/api.md)
HUB_TEMPLATES = str(HERE.parent / "hub_templates")
UTC = dt.timezone.utc
ADMIN_ACTIONS = ("reclaim", "exempt", "clear-intent", "retry-stop")
MAX_EXEMPT_HOURS = 24 * 14


def static_dir() -> Path:
    """The top-level static/ folder: in a checkout, else where the package installed it."""
    for candidate in (HERE.parent.parent / "static",
                      Path(sys.prefix) / "share" / "jupyterhub-gpu-reclaim" / "static"):
        if (candidate / "reclaim.js").is_file():
            return candidate
    return HERE.parent.parent / "static"


# --------------------------------------------------------------------------- helpers


def iso(value: Any) -> Any:
    """JSON-able: datetimes as RFC 3339 (UTC, Z)."""
    if isinstance(value, dt.datetime):
        return format_time(value)
    if isinstance(value, dict):
        return {k: iso(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [iso(v) for v in value]
    return value


def hhmm(value: Any) -> str:
    t = parse_time(value) if isinstance(value, str) else value
    return t.astimezone(UTC).strftime("%H:%M UTC") if t else ""


def human(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    h, m = divmod(seconds // 60, 60)
    if h >= 24:
        return f"{h // 24} d {h % 24} h"
    return f"{h} h {m} min" if h else f"{m} min"


def state_of(info: dict[str, Any], now: dt.datetime) -> tuple[str, str]:
    """(kind, text) of a session's reclaim state, as the pages show it."""
    if info.get("stopping"):
        return "stopping", "stopping"
    if info.get("exempt_until") or info.get("rule") == "exempt":
        until = info.get("exempt_until")
        return "exempt", f"exempt until {hhmm(until)}" if until else "exempt"
    if info.get("intent_until") and info["intent_until"] > now:  # a new intent ends the warning
        return "kept", f"kept alive until {hhmm(info['intent_until'])}"
    if info.get("warned_at") and info.get("reclaim_at"):
        return "warned", f"warned: reclaim at {hhmm(info['reclaim_at'])}"
    if info.get("action") == "hold":
        return "held", f"held: data missing ({info.get('reason') or info.get('rule')})"
    if not info.get("gpus"):
        return "cpu", "no GPU"
    since = (info.get("evidence") or {}).get("idle_since")
    if info.get("rule") in IDLE_RULES and since:
        return "idle", f"idle since {hhmm(since)}"
    return "active", "active"


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    """An inline SVG of utilization (0–100 %) over the window; gaps where data is missing.
    Only numbers go into it, so it is safe to include unescaped."""
    n = len(values)
    if not n:
        return ""
    step = width / max(1, n - 1)
    segments: list[list[str]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            if segments[-1]:
                segments.append([])
            continue
        y = height - 1 - (min(100.0, max(0.0, float(v))) / 100.0) * (height - 2)
        segments[-1].append(f"{i * step:.1f},{y:.1f}")
    lines = "".join(f'<polyline points="{" ".join(s)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                    for s in segments if s)
    last = next((v for v in reversed(values) if v is not None), None)
    label = f"GPU utilization over the window, latest {last:.0f} %" if last is not None else "no GPU data"
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{label}"><rect width="{width}" height="{height}" fill="none" '
            f'stroke="#ccc"/>{lines}</svg>')


def _fmt_util(values: list | None) -> str:
    if not values:
        return "–"
    return " / ".join("–" if v is None else f"{v:.0f} %" for v in values)


def csv_cell(value: Any) -> str:
    """A CSV cell that a spreadsheet does not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class BadInput(Exception):
    """Bad input from the user: 400 with this message, nothing changed."""


@dataclass
class Context:
    metrics: Metrics
    prefix: str
    store: Store | None = None
    hub_auth: HubAuth | None = None
    reclaimer: Any = None  # service.Reclaimer
    policy: PolicyConfig | None = None
    admin_scope: str = "custom:gpu-reclaim:admin"
    dry_run: bool = False
    hub_prefix: str = "/hub/"

    @property
    def max_keepalive(self) -> dt.timedelta:
        return self.policy.max_keepalive if self.policy else dt.timedelta(hours=12)

    def snapshot(self) -> dict[str, Any]:
        if self.reclaimer is None:
            return {"t": None, "skipped": None, "sessions": {}, "queue": []}
        return self.reclaimer.snapshot()


# --------------------------------------------------------------------------- plain handlers


class MetricsHandler(web.RequestHandler):
    def initialize(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write(generate_latest(self.metrics.registry))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.write({"status": "ok"})


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
        since_text = self.get_argument("since", "1d")
        try:
            since = parse_time(since_text) if "T" in since_text else (
                dt.datetime.now(dt.timezone.utc) - parse_duration(since_text))
        except ValueError:
            raise web.HTTPError(400, f"since: not a time or a duration: {since_text!r}") from None
        records = [r for r in self.store.reclaims(since) if r.session.split("/", 1)[0] == user]
        self.write({"reclaims": [{
            "session": r.session, "server": r.session.split("/", 1)[1], "rule": r.rule,
            "t": format_time(r.t), "gpus": r.gpus, "outcome": r.outcome,
            "finished_at": format_time(r.finished_at) if r.finished_at else None,
        } for r in records]})


# --------------------------------------------------------------------------- authenticated base


_jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True)
_jinja.filters.update(hhmm=hhmm, human=human, util=_fmt_util, iso=iso)


class Base(HubOAuthenticated, web.RequestHandler):
    api = False

    def initialize(self, ctx: Context) -> None:
        self.ctx = ctx
        self.hub_auth = ctx.hub_auth

    # ---- who

    @property
    def user_name(self) -> str:
        return self.current_user.get("name", "")

    @property
    def is_admin(self) -> bool:
        u = self.current_user or {}
        return bool(u.get("admin")) or self.ctx.admin_scope in (u.get("scopes") or [])

    def require_admin(self) -> None:
        if not self.is_admin:
            raise web.HTTPError(403, f"admins only: the hub's admin flag or the scope {self.ctx.admin_scope}")

    def get_login_url(self) -> str:
        if self.api or self.request.method not in ("GET", "HEAD"):
            raise web.HTTPError(403, "authentication required: a hub token with access to this service, "
                                     "or the service's login cookie (with its _xsrf token for writes)")
        return super().get_login_url()

    # ---- output

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = self._reason
        exc = kwargs.get("exc_info")
        if exc and isinstance(exc[1], web.HTTPError) and exc[1].log_message:
            message = exc[1].log_message % exc[1].args if exc[1].args else exc[1].log_message
        if self.api:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status_code, "message": message}))
        else:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(self.render_page("error.html", status=status_code, message=message))

    def render_page(self, name: str, **ns: Any) -> str:
        user = self.current_user if hasattr(self, "_hub_auth_user_cache") else None
        base = {"prefix": self.ctx.prefix, "hub_prefix": self.ctx.hub_prefix, "user": user,
                "is_admin": bool(user) and self.is_admin, "dry_run": self.ctx.dry_run,
                "xsrf": self.xsrf_token.decode() if user else "", "now": now(),
                "sparkline": sparkline, "state_of": state_of, "quote": quote,
                "max_keepalive": self.ctx.max_keepalive}
        return _jinja.get_template(name).render(**{**base, **ns})

    def write_json(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(iso(value)))

    def json_body(self) -> dict[str, Any]:
        if not self.request.body:
            return {}
        try:
            body = json.loads(self.request.body)
        except ValueError as e:
            raise web.HTTPError(400, f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        return body

    # ---- data

    def my_sessions(self) -> dict[str, dict[str, Any]]:
        return {sid: s for sid, s in self.ctx.snapshot()["sessions"].items() if s["user"] == self.user_name}

    def my_queue(self) -> list[dict[str, Any]]:
        return [q for q in self.ctx.snapshot()["queue"] if q["user"] == self.user_name]

    def own_session(self, sid: str) -> dict[str, Any]:
        """The caller's running session `sid`; 404 for anyone else's (or none)."""
        info = self.my_sessions().get(sid)
        if info is None:
            raise web.HTTPError(404, f"no running session {sid!r} of yours")
        return info

    def session_json(self, info: dict[str, Any]) -> dict[str, Any]:
        kind, text = state_of(info, now())
        return {**{k: v for k, v in info.items() if k != "url"}, "state": kind, "state_text": text}

    def user_reclaims(self, days: int = 7) -> list[dict[str, Any]]:
        if self.ctx.store is None:
            return []
        since = now() - dt.timedelta(days=days)
        return [reclaim_json(r) for r in self.ctx.store.reclaims(since)
                if r.session.split("/", 1)[0] == self.user_name][::-1]

    # ---- actions shared by the API and the forms

    def do_keepalive(self, sid: str, until: dt.datetime) -> dt.datetime:
        self.own_session(sid)
        t = now()
        cap = self.ctx.max_keepalive
        if until <= t:
            raise BadInput(f"the time {format_time(until)} is in the past")
        if until > t + cap + dt.timedelta(minutes=1):
            raise BadInput(f"{format_time(until)} is beyond the cap: at most {human(cap.total_seconds())} "
                           f"from now ({hhmm(t + cap)})")
        until = min(until, t + cap)
        assert self.ctx.store is not None
        self.ctx.store.set_intent(sid, until, t, by=self.user_name)
        self.ctx.store.audit(self.user_name, "keepalive", sid, t=t, until=until)
        info = self.ctx.snapshot()["sessions"].get(sid)
        if info is not None:  # shown at once; the next cycle decides with it
            info["intent_until"], info["intent_set_at"] = until, t
        log.info("%s keeps %s alive until %s", self.user_name, sid, format_time(until))
        return until

    def do_clear_intent(self, sid: str, actor: str) -> bool:
        assert self.ctx.store is not None
        t = now()
        cleared = self.ctx.store.clear_intent(sid, t)
        self.ctx.store.audit(actor, "clear-intent", sid, t=t, cleared=cleared)
        info = self.ctx.snapshot()["sessions"].get(sid)
        if info is not None:
            info["intent_until"] = None
        return cleared

    def do_stop(self, sid: str) -> None:
        self.own_session(sid)
        user, _, server = sid.partition("/")
        if self.ctx.reclaimer is None or not self.ctx.reclaimer.stop_now(user, server, by=self.user_name,
                                                                         record=False):
            raise web.HTTPError(409, f"{sid} is already being stopped")
        assert self.ctx.store is not None
        self.ctx.store.audit(self.user_name, "stop", sid)

    def do_admin_action(self, action: str, sid: str, hours: Any = None) -> str:
        if action not in ADMIN_ACTIONS:
            raise BadInput(f"action must be one of {', '.join(ADMIN_ACTIONS)}, not {action!r}")
        if not isinstance(sid, str) or "/" not in sid:
            raise BadInput(f"session must be USER/SERVER, not {sid!r}")
        store = self.ctx.store
        assert store is not None
        snap = self.ctx.snapshot()
        running = sid in snap["sessions"]
        user, _, server = sid.partition("/")
        admin = self.user_name
        if action == "reclaim":
            if not running:
                raise web.HTTPError(404, f"no running session {sid!r}")
            if self.ctx.reclaimer is None or not self.ctx.reclaimer.stop_now(user, server, by=admin):
                raise web.HTTPError(409, f"a stop of {sid} is already under way")
            store.audit(admin, "reclaim", sid)
            return f"reclaiming {sid}"
        if action == "exempt":
            try:
                h = float(hours)
            except (TypeError, ValueError):
                raise BadInput(f"hours must be a number, not {hours!r}") from None
            if not 0 < h <= MAX_EXEMPT_HOURS:
                raise BadInput(f"hours must be in (0, {MAX_EXEMPT_HOURS}], not {h:g}")
            if not running:
                raise web.HTTPError(404, f"no running session {sid!r}")
            t = now()
            until = t + dt.timedelta(hours=h)
            store.set_exemption(sid, until, t, by=admin)
            store.audit(admin, "exempt", sid, t=t, hours=h, until=until)
            snap["sessions"][sid]["exempt_until"], snap["sessions"][sid]["exempt_by"] = until, admin
            return f"{sid} exempt until {hhmm(until)}"
        if action == "clear-intent":
            if not running and sid not in store.intents():
                raise web.HTTPError(404, f"no session {sid!r} with an intent")
            cleared = self.do_clear_intent(sid, admin)
            return f"intent of {sid} cleared" if cleared else f"{sid} had no intent"
        # retry-stop
        if not any(r.session == sid for r in store.stuck_reclaims()):
            raise web.HTTPError(404, f"no stuck stop of {sid!r}")
        if self.ctx.reclaimer is None or not self.ctx.reclaimer.retry_stuck(sid):
            raise web.HTTPError(409, f"a stop of {sid} is already under way")
        store.audit(admin, "retry-stop", sid)
        return f"retrying the stop of {sid}"

    # ---- admin data

    def admin_data(self) -> dict[str, Any]:
        snap = self.ctx.snapshot()
        t = now()
        sessions = [self.session_json(s) for s in snap["sessions"].values() if s["gpus"]]
        sessions.sort(key=lambda s: (s["user"], s["server"]))
        today = t.replace(hour=0, minute=0, second=0, microsecond=0)
        idle_hours = 0.0
        for s in sessions:
            since = parse_time((s.get("evidence") or {}).get("idle_since"))
            if s.get("rule") in IDLE_RULES and since is not None:
                idle_hours += s["gpus"] * max(0.0, (t - max(since, today)).total_seconds()) / 3600
        store = self.ctx.store
        reclaims = [reclaim_json(r, t) for r in (store.reclaims(t - dt.timedelta(days=7)) if store else [])][::-1]
        stuck = [reclaim_json(r, t) for r in (store.stuck_reclaims() if store else [])]
        queue = [{**q, "waited": human(q.get("waited_s"))} for q in snap["queue"]]
        totals = {"gpu_sessions": len(sessions), "gpus_held": sum(s["gpus"] for s in sessions),
                  "gpus_idle": sum(s["gpus"] for s in sessions if s.get("rule") in IDLE_RULES),
                  "gpu_hours_idle_today": round(idle_hours, 2), "waiting": len(queue),
                  "gpus_waited_for": sum(q["gpus"] for q in queue),
                  "gpu_hours_freed_7d": round(sum(r["gpu_hours_freed"] for r in reclaims), 2)}
        p = self.ctx.policy
        policy = {} if p is None else {
            "gpu_idle_threshold_percent": p.gpu_idle_threshold,
            "never_used_warn_after": human(p.never_used_warn_after.total_seconds()),
            "never_used_reclaim_after": human(p.never_used_reclaim_after.total_seconds()),
            "idle_warn_after": human(p.idle_warn_after.total_seconds()),
            "idle_reclaim_after": human(p.idle_reclaim_after.total_seconds()),
            "warning_lead": human(p.warning_lead.total_seconds()),
            "max_keepalive": human(p.max_keepalive.total_seconds()),
        }
        return {"t": snap["t"], "skipped": snap["skipped"], "dry_run": self.ctx.dry_run,
                "sessions": sessions, "queue": queue, "reclaims": reclaims, "stuck": stuck,
                "totals": totals, "policy": policy,
                "audit": (store.audit_log(t - dt.timedelta(days=7)) if store else [])[::-1][:100]}


def now() -> dt.datetime:
    return dt.datetime.now(UTC)


def reclaim_json(r: Any, t: dt.datetime | None = None) -> dict[str, Any]:
    t = t or now()
    end = r.finished_at or r.t
    freed = r.gpus * max(0.0, min((t - end).total_seconds(), 24 * 3600)) / 3600 if r.outcome == "stopped" else 0.0
    return {"id": r.id, "session": r.session, "user": r.session.split("/", 1)[0],
            "server": r.session.split("/", 1)[1], "rule": r.rule, "t": r.t, "gpus": r.gpus,
            "outcome": r.outcome, "finished_at": r.finished_at, "detail": r.detail,
            "by": (r.evidence or {}).get("by"), "gpu_hours_freed": round(freed, 2),
            "kept": "files under your home directory",
            "lost": "running processes, kernel and GPU memory, /tmp, packages installed outside home"}


def parse_until(body: dict[str, Any], cap: dt.timedelta) -> dt.datetime:
    """`{"until": ISO time}` or `{"duration": "2h"}` / `{"hours": 2}` → an aware time."""
    keys = [k for k in ("until", "duration", "hours") if body.get(k) not in (None, "")]
    if len(keys) != 1:
        raise BadInput('give exactly one of "until" (an ISO 8601 time), "duration" (e.g. "2h") or "hours"')
    key = keys[0]
    value = body[key]
    try:
        if key == "until":
            t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            if t.tzinfo is None:
                raise ValueError("no time zone")
            return t.astimezone(UTC)
        if key == "hours":
            if isinstance(value, bool):
                raise ValueError
            return now() + dt.timedelta(hours=float(value))
        return now() + parse_duration(str(value))
    except (ValueError, TypeError, OverflowError):
        raise BadInput(f"{key}: not a valid {'time with a time zone' if key == 'until' else 'duration'}: "
                       f"{value!r}") from None


# --------------------------------------------------------------------------- JSON API


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
        text = self.get_argument("since", "7d")
        try:
            since = parse_time(text) if "T" in text else now() - parse_duration(text)
        except (ValueError, OverflowError):
            raise web.HTTPError(400, f"since: not a time or a duration: {text!r}") from None
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


# --------------------------------------------------------------------------- pages


def _local_next(prefix: str, value: str | None, default: str) -> str:
    """A redirect target inside the service only (no open redirect)."""
    if value and value.startswith(prefix) and "//" not in value and "\\" not in value:
        return value
    return default


class UserPage(Base):
    template = "user.html"

    @web.authenticated
    def get(self) -> None:
        self.show()

    def show(self, error: str = "", status: int = 200, notice: str = "") -> None:
        selected = self.get_argument("session", "")
        sessions = sorted(self.my_sessions().values(), key=lambda s: (s["server"] != "", s["server"]))
        cap = self.ctx.max_keepalive
        presets = [h for h in (1, 2, 4, 8, 12, 24, 48) if dt.timedelta(hours=h) <= cap] or [cap.total_seconds() / 3600]
        self.set_status(status)
        self.finish(self.render_page(self.template, sessions=sessions, queue=self.my_queue(),
                                     reclaims=self.user_reclaims(), selected=selected, error=error,
                                     notice=notice or self.get_argument("notice", ""), presets=presets,
                                     cap_text=human(cap.total_seconds()), cycle_t=self.ctx.snapshot()["t"],
                                     here=self.request.path))


class KeepalivePage(Base):
    """The link of the warning messages: the user page with the session selected."""

    @web.authenticated
    def get(self) -> None:
        session = self.get_argument("session", "")
        if not session:  # the notices link here without one: select the warned session
            t = now()
            warned = [sid for sid, s in sorted(self.my_sessions().items()) if state_of(s, t)[0] == "warned"]
            session = warned[0] if warned else ""
        target = self.ctx.prefix + ("?" + urlencode({"session": session}) + "#s-" + quote(session, safe="")
                                    if session else "")
        self.redirect(target)


class KeepaliveForm(UserPage):
    @web.authenticated
    def post(self) -> None:
        sid = self.get_argument("session", "")
        nxt = _local_next(self.ctx.prefix, self.get_argument("next", None), self.ctx.prefix)
        if nxt.rstrip("/").endswith("embed/home"):
            self.template = "embed_home.html"
        try:
            self.own_session(sid)
            duration = self.get_argument("duration", "")
            at = self.get_argument("until_time", "")
            if at:
                until = local_time_to_utc(at, self.get_argument("tz_offset", "0"))
            elif duration:
                until = parse_until({"duration": duration}, self.ctx.max_keepalive)
            else:
                raise BadInput("choose a duration or a time")
            until = self.do_keepalive(sid, until)
        except BadInput as e:
            self.show(error=f"{sid}: {e}", status=400)
            return
        sep = "&" if "?" in nxt else "?"
        self.redirect(nxt + sep + urlencode({"session": sid, "notice": f"kept alive until {hhmm(until)}"}),
                      status=303)


class StopForm(UserPage):
    @web.authenticated
    def post(self) -> None:
        sid = self.get_argument("session", "")
        self.do_stop(sid)
        nxt = _local_next(self.ctx.prefix, self.get_argument("next", None), self.ctx.prefix)
        sep = "&" if "?" in nxt else "?"
        self.redirect(nxt + sep + urlencode({"notice": f"stopping {sid}: the GPU is freed in a moment"}),
                      status=303)


def local_time_to_utc(text: str, tz_offset: str) -> dt.datetime:
    """"HH:MM" in the browser's zone (tz_offset: minutes as JS getTimezoneOffset gives, 0 without
    JS: UTC) → the next such moment, in UTC."""
    try:
        hh, mm = (int(x) for x in text.split(":")[:2])
        off = int(tz_offset or 0)
        if not (0 <= hh < 24 and 0 <= mm < 60 and -900 <= off <= 900):
            raise ValueError
    except ValueError:
        raise BadInput(f"not a time HH:MM: {text!r}") from None
    local_now = now() - dt.timedelta(minutes=off)
    t = local_now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if t <= local_now:
        t += dt.timedelta(days=1)
    return t + dt.timedelta(minutes=off)


class EmbedHome(UserPage):
    """For the hub's home page (an iframe): the sessions, their state and keep-alive."""

    template = "embed_home.html"

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Content-Security-Policy", "frame-ancestors 'self'")


class EmbedBanner(Base):
    """For every hub page (an iframe in the announcement block): a banner when warned."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Content-Security-Policy", "frame-ancestors 'self'")

    def get_login_url(self) -> str:
        # never start an OAuth dance for the banner: it shows nothing until the user
        # has visited the service once (the home page's panel logs in)
        raise web.HTTPError(403, "not logged in to the service")

    @web.authenticated
    def get(self) -> None:
        t = now()
        warned = []
        for s in self.my_sessions().values():
            kind, _ = state_of(s, t)
            if kind == "warned":
                since = parse_time((s.get("evidence") or {}).get("idle_since")) or s.get("started")
                warned.append({**s, "idle_for": human((t - since).total_seconds()) if since else ""})
        self.finish(self.render_page("embed_banner.html", warned=warned))


class AdminPage(Base):
    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        self.finish(self.render_page("admin.html", data=self.admin_data(),
                                     notice=self.get_argument("notice", ""), error=""))


class AdminActionForm(Base):
    """Admin actions from the page: a confirmation page first (works without JS), then the action."""

    @web.authenticated
    def post(self) -> None:
        self.require_admin()
        action = self.get_argument("action", "")
        sid = self.get_argument("session", "")
        hours = self.get_argument("hours", None)
        if self.get_argument("confirm", "") != "yes":
            self.finish(self.render_page("confirm.html", action=action, session=sid, hours=hours))
            return
        try:
            message = self.do_admin_action(action, sid, hours)
        except BadInput as e:
            self.set_status(400)
            self.finish(self.render_page("admin.html", data=self.admin_data(), notice="", error=str(e)))
            return
        self.redirect(self.ctx.prefix + "admin?" + urlencode({"notice": message}), status=303)


class OAuthCallback(HubOAuthCallbackHandler):
    def initialize(self, ctx: Context) -> None:
        self.hub_auth = ctx.hub_auth


# --------------------------------------------------------------------------- the app


def _log_request(handler: web.RequestHandler) -> None:
    """The access log: method, path and status, never the query (OAuth codes go there)."""
    status = handler.get_status()
    level = logging.DEBUG if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    log.log(level, "%d %s %s %.1f ms", status, handler.request.method, handler.request.path,
            1000 * handler.request.request_time())


def _cookie_secret(path: str) -> bytes:
    if path:
        data = Path(path).read_bytes().strip()
        try:
            return bytes.fromhex(data.decode("ascii"))
        except ValueError:
            return data
    return secrets.token_bytes(32)


def make_app(metrics: Metrics, prefix: str = "/", store: Store | None = None,
             hub_auth: HubAuth | None = None, *, reclaimer: Any = None, policy: PolicyConfig | None = None,
             admin_scope: str = "custom:gpu-reclaim:admin", dry_run: bool = False,
             cookie_secret_file: str = "", hub_prefix: str = "/hub/") -> web.Application:
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    routes: list = [
        (prefix + "metrics", MetricsHandler, {"metrics": metrics}),
        (prefix + "health", HealthHandler),
    ]
    if store is not None and hub_auth is not None:
        routes.append((prefix + "api/reclaims", ReclaimsHandler, {"store": store, "hub_auth": hub_auth}))
        ctx = Context(metrics=metrics, prefix=prefix, store=store, hub_auth=hub_auth, reclaimer=reclaimer,
                      policy=policy, admin_scope=admin_scope, dry_run=dry_run, hub_prefix=hub_prefix)
        c = {"ctx": ctx}
        session = r"([^/]+)/([^/]*)"
        routes += [
            (prefix, UserPage, c),
            (prefix + "keepalive", KeepalivePage, c),
            (prefix + "sessions/keepalive", KeepaliveForm, c),
            (prefix + "sessions/stop", StopForm, c),
            (prefix + "embed/home", EmbedHome, c),
            (prefix + "embed/banner", EmbedBanner, c),
            (prefix + "admin", AdminPage, c),
            (prefix + "admin/action", AdminActionForm, c),
            (prefix + "api/sessions", SessionsApi, c),
            (prefix + f"api/sessions/{session}/intent", IntentApi, c),
            (prefix + f"api/sessions/{session}/stop", StopApi, c),
            (prefix + "api/admin/candidates", AdminCandidatesApi, c),
            (prefix + "api/admin/queue", AdminQueueApi, c),
            (prefix + "api/admin/history", AdminHistoryApi, c),
            (prefix + "api/admin/actions", AdminActionsApi, c),
            (prefix + "oauth_callback", OAuthCallback, c),
            (prefix + "static/(.*)", web.StaticFileHandler, {"path": str(static_dir())}),
        ]
    if prefix != "/":
        routes.append((r"/metrics", MetricsHandler, {"metrics": metrics}))
        if prefix != "/":
            routes.append((prefix.rstrip("/"), web.RedirectHandler, {"url": prefix}))
    settings: dict[str, Any] = {"cookie_secret": _cookie_secret(cookie_secret_file),
                                "log_function": _log_request}
    return web.Application(routes, **settings)


def listen(app: web.Application, bind_url: str) -> HTTPServer:
    """Listen on the host and port of `bind_url` (http://HOST:PORT)."""
    parts = urlsplit(bind_url)
    if parts.scheme != "http" or not parts.port:
        raise ValueError(f"the service URL must be http://HOST:PORT, got {bind_url!r}")
    server = HTTPServer(app, xheaders=True)
    server.listen(parts.port, parts.hostname or "127.0.0.1")
    return server


__all__ = ["HUB_TEMPLATES", "make_app", "listen", "sparkline", "state_of"]
