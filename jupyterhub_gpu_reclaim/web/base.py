"""The hub-authenticated handlers' base: who calls (HubOAuth login cookie or hub token, XSRF
for cookie writes; users act on their own sessions, hub services on none; admin rights from
the token's scopes), what a request may send (a small body, refused before it is read) and
how often a user may change something, the pages' headers and notices, logs without
secrets, their shared context and data (the changes they make are `controls`), and the OAuth
callback."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, quote, urlencode

from jupyterhub.services.auth import HubAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import httputil, web
from tornado.http1connection import HTTP1Connection
from tornado.log import app_log, gen_log

from ..service.metrics import Metrics
from ..settings.service_options import ServiceSettings
from ..service.status import SessionStatus, WaitingServer
from ..store import Store
from ..store.reclaims import ReclaimRecord
from ..timestamps import jsonable, utcnow
from .controls import Controls, Reclaiming
from .ratelimit import READS_PER_MINUTE, WriteLimiter
from ..service.daily_hours import FREED_MEANS, WAITING_MEANS
from .admin_view import admin_data
from .chart import usage_chart
from .render import _jinja, sparkline, state_of

log = logging.getLogger("jupyterhub_gpu_reclaim.web")

#: the largest request body taken (the forms and JSON bodies are a few hundred bytes);
#: the HTTP server refuses a larger one without reading it
MAX_BODY = 64 * 1024
#: a larger body up to this size is read and dropped, then refused (413, or 403 without
#: credentials): refused unread, the connection closed under the hub's proxy while it still
#: forwarded the body, and it answered its own 503 in place of the 413 it had not read yet.
#: A body larger still is refused before it is read, the connection closed: the service
#: reads no more than this for nothing
DRAINED_MAX = 16 * 1024 * 1024
NOT_AUTHENTICATED = ("authentication required: a hub token with access to this service, "
                     "or the service's login cookie (with its _xsrf token for writes)")
#: query parameters whose values never reach a log (OAuth codes and states, tokens)
SECRET_PARAMS = frozenset({"code", "state", "token", "access_token", "_xsrf", "code_verifier"})
NOTICE_COOKIE = "gpu-reclaim-notice"


@dataclass
class Context:
    """What the handlers share: the service's settings (the policy and its rules, the admin
    scope, dry run, the write limit) and its running parts."""

    metrics: Metrics
    prefix: str
    settings: ServiceSettings = ServiceSettings()
    store: Store | None = None
    hub_auth: HubAuth | None = None
    reclaimer: Reclaiming | None = None  # service.Reclaimer: its status and stops
    hub_prefix: str = "/hub/"
    limiter: WriteLimiter = field(init=False)  # --user-writes-per-minute
    read_limiter: WriteLimiter = field(default_factory=lambda: WriteLimiter(READS_PER_MINUTE))

    def __post_init__(self) -> None:
        self.prefix = "/" + self.prefix.strip("/") + "/" if self.prefix.strip("/") else "/"
        self.limiter = WriteLimiter(self.settings.user_writes_per_minute)

    @property
    def max_keepalive(self) -> dt.timedelta:
        return self.settings.policy.max_keepalive

    @functools.cached_property
    def controls(self) -> Controls:
        assert self.store is not None  # the pages are served only with a store
        return Controls(self.store, self.reclaimer, self.max_keepalive)


def redacted_uri(request: httputil.HTTPServerRequest) -> str:
    """The request's path and query for a log line: secret values hidden, everything
    percent-encoded (a value cannot forge a line)."""
    path = quote(request.path, safe="/%:@!$&'()*+,;=-._~")
    query = [(k, "[secret]" if k.lower() in SECRET_PARAMS else v)
             for k, v in parse_qsl(request.query, keep_blank_values=True)]
    return path + ("?" + urlencode(query, safe="[]") if query else "")


class RedactedLogs(web.RequestHandler):
    """tornado's error log lines name the request by its URI, query included (an OAuth
    callback's code and state): name it without secrets instead."""

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        summary = f"{self.request.method} {redacted_uri(self.request)} ({self.request.remote_ip})"
        if isinstance(value, web.HTTPError):
            if value.log_message:
                message = value.log_message % value.args if value.args else value.log_message
                gen_log.warning("%d %s: %s", value.status_code, summary, message)
        else:
            app_log.error("Uncaught exception %s", summary, exc_info=(typ, value, tb))


def writes(method: Callable) -> Callable:
    """@web.authenticated for a user's change (keep alive, clear, stop): counted against the
    user's --user-writes-per-minute (429 with Retry-After beyond it)."""

    @functools.wraps(method)
    @web.authenticated
    def wrapper(self: "Base", *args: Any, **kwargs: Any) -> Any:
        wait = self.ctx.limiter.take(self.user_name)
        if wait:
            self.retry_after = max(1, math.ceil(wait))
            raise web.HTTPError(429, f"too many changes: at most {self.ctx.limiter.per_minute} a minute; "
                                     f"try again in {self.retry_after} s")
        return method(self, *args, **kwargs)

    return wrapper


@web.stream_request_body
class Base(HubOAuthenticated, RedactedLogs):
    """The body arrives after prepare() has checked its declared size (and refused one too
    large, checking the credentials first); it is then parsed as tornado parses it (form
    fields; JSON in `json_body`)."""

    api = False
    embedded = False  # shown inside the hub's pages (same-origin iframes)
    retry_after = 0

    def initialize(self, ctx: Context) -> None:
        self.ctx = ctx
        assert ctx.hub_auth is not None  # web.app mounts the pages only with the hub's auth
        self.hub_auth = ctx.hub_auth
        self._chunks: list[bytes] | None = []  # None: a refused body, dropped

    def prepare(self) -> None:
        length = self.request.headers.get("Content-Length", "0").strip()
        if not length.isdigit() or int(length) > MAX_BODY:
            # who asks is checked first (from the headers: a cookie would need the body's _xsrf)
            token = self.request.headers.get("Authorization")
            if not token and not self.get_secure_cookie(self.hub_auth.cookie_name):
                refusal = web.HTTPError(403, NOT_AUTHENTICATED)
            elif token and self.current_user is None:
                refusal = web.HTTPError(403, NOT_AUTHENTICATED)
            else:
                refusal = web.HTTPError(413, f"the request body is larger than {MAX_BODY // 1024} KiB")
            if not length.isdigit() or int(length) > DRAINED_MAX:
                raise refusal  # before the body, which tornado leaves unread (it closes the connection)
            connection = self.request.connection
            assert isinstance(connection, HTTP1Connection)  # the server's (web.app.listen)
            connection.set_max_body_size(DRAINED_MAX)
            self._chunks = None  # the body is dropped as it comes
            self._answer_with(refusal)
            return
        # runs before the handler's method: the body's future got this callback first
        self.request._body_future.add_done_callback(self._body_received)
        if self.request.method in ("GET", "HEAD") and self._read_wait():
            self._answer_with(web.HTTPError(429, f"too many requests: at most {self.ctx.read_limiter.per_minute} "
                                                 f"reads a minute; try again in {self.retry_after} s"))

    def _answer_with(self, error: web.HTTPError) -> None:
        """`error` in the method's place, once the body is read: a refusal from prepare()
        closes the connection unread, and the hub's proxy, still forwarding the body or
        sending the next request on it (anyone's), answers its own 503 in place of ours."""
        def refuse(*args: Any, **kwargs: Any) -> None:
            raise error
        setattr(self, self.request.method.lower(), refuse)

    def _read_wait(self) -> float:
        """A user's reads beyond READS_PER_MINUTE: the seconds until the next is allowed.
        Only users count: hub services (the spawner's asks) and the unauthenticated
        (refused anyway) are not limited."""
        caller = self.current_user
        if not caller or caller.get("kind") != "user":
            return 0.0
        wait = self.ctx.read_limiter.take(caller["name"])
        self.retry_after = max(1, math.ceil(wait)) if wait else 0
        return wait

    def data_received(self, chunk: bytes) -> None:
        if self._chunks is not None:
            self._chunks.append(chunk)

    def _body_received(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        request = self.request
        request.body = b"".join(self._chunks or ())
        httputil.parse_body_arguments(request.headers.get("Content-Type", ""), request.body,
                                      request.body_arguments, request.files, request.headers)
        for name, values in request.body_arguments.items():
            request.arguments.setdefault(name, []).extend(values)

    # ---- who

    @property
    def user_name(self) -> str:
        """The caller as a hub user. A hub service is nobody here, whatever its name."""
        caller = self.current_user
        if caller.get("kind") != "user":
            raise web.HTTPError(403, "hub services have no GPU sessions: this needs a user's token or login")
        return caller["name"]

    @property
    def actor(self) -> str:
        """Who did it, for the audit log: the user's name, or service:NAME."""
        caller = self.current_user
        return caller["name"] if caller.get("kind") == "user" else f"service:{caller['name']}"

    @property
    def is_admin(self) -> bool:
        """Admin rights come from the scopes of the credential used (a down-scoped token of a
        hub admin has none), never from the hub's admin flag."""
        return self.ctx.settings.admin_scope in ((self.current_user or {}).get("scopes") or [])

    def require_admin(self) -> None:
        if not self.is_admin:
            raise web.HTTPError(403, f"admins only: a token or login with the scope {self.ctx.settings.admin_scope}")

    def get_login_url(self) -> str:
        if self.api or self.request.method not in ("GET", "HEAD"):
            raise web.HTTPError(403, NOT_AUTHENTICATED)
        return super().get_login_url()

    def next_page(self) -> str:
        """Where a form goes back to (its `next` field): the user page or the hub home
        panel, nothing else; refused before anything is done."""
        value = self.get_argument("next", "") or self.ctx.prefix
        if value not in (self.ctx.prefix, self.ctx.prefix + "embed/home"):
            raise web.HTTPError(400, f"next: not a page of this service: {value!r}")
        self.embedded = value != self.ctx.prefix
        self.set_default_headers()
        return value

    # ---- output

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")
        # as the hub: no framing, except the embeds in the hub's own pages
        ancestors = "'self'" if self.embedded else "'none'"
        # data: images: the hub's Bootstrap draws a select's arrow and a checkbox's tick as
        # data: SVGs (refused by default-src, the report's period control had no arrow)
        self.set_header("Content-Security-Policy",
                        f"default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
                        f"frame-ancestors {ancestors}")
        self.set_header("X-Frame-Options", "SAMEORIGIN" if self.embedded else "DENY")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = self._reason
        exc = kwargs.get("exc_info")
        if exc and isinstance(exc[1], web.HTTPError) and exc[1].log_message:
            message = exc[1].log_message % exc[1].args if exc[1].args else exc[1].log_message
        if status_code == 429 and self.retry_after:
            self.set_header("Retry-After", str(self.retry_after))
        if self.api:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status_code, "message": message}))
        else:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(self.render_page("error.html", status=status_code, message=message))

    def render_page(self, name: str, **ns: Any) -> str:
        user = self.current_user if hasattr(self, "_hub_auth_user_cache") else None
        base = {"prefix": self.ctx.prefix, "hub_prefix": self.ctx.hub_prefix, "user": user,
                "is_admin": bool(user) and self.is_admin, "dry_run": self.ctx.settings.dry_run,
                "xsrf": self.xsrf_token.decode() if user else "", "now": utcnow(),
                "sparkline": sparkline, "state_of": state_of, "quote": quote,
                "max_keepalive": self.ctx.max_keepalive}
        return _jinja.get_template(name).render(**{**base, **ns})

    def write_json(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(jsonable(value)))

    def json_body(self) -> dict[str, Any]:
        if not self.request.body:
            return {}
        try:
            body = json.loads(self.request.body)
        except RecursionError:
            raise web.HTTPError(400, "the body is not JSON: nested too deeply") from None
        except ValueError as e:
            raise web.HTTPError(400, f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        return body

    # ---- notices: the sentence a form's action leads to, shown once by the next page. It
    # travels in a signed cookie, never in the URL, so no link can make a page say anything.

    def flash(self, text: str) -> None:
        self.set_signed_cookie(NOTICE_COOKIE, text, expires_days=None, path=self.ctx.prefix,
                               httponly=True, samesite="Lax", secure=self.request.protocol == "https")

    def take_notice(self) -> str:
        text = self.get_signed_cookie(NOTICE_COOKIE, max_age_days=1 / 1440)  # a minute old at most
        if self.get_cookie(NOTICE_COOKIE) is not None:
            self.clear_cookie(NOTICE_COOKIE, path=self.ctx.prefix)
        return text.decode() if text else ""

    # ---- data

    def my_sessions(self) -> dict[str, SessionStatus]:
        return self.ctx.controls.sessions_of(self.user_name)

    def my_queue(self) -> list[WaitingServer]:
        return self.ctx.controls.waiting_of(self.user_name)

    def own_session(self, sid: str) -> SessionStatus:
        """The caller's running session `sid`; 404 for anyone else's (or none)."""
        return self.ctx.controls.own_session(self.user_name, sid)

    def user_reclaims(self, days: int = 7) -> list[ReclaimRecord]:
        """The caller's reclaims of the last `days`, newest first."""
        if self.ctx.store is None:
            return []
        since = utcnow() - dt.timedelta(days=days)
        return self.ctx.store.reclaims(since, user=self.user_name)[::-1]

    # ---- admin data

    def admin_data(self) -> dict[str, Any]:
        return admin_data(self.ctx.controls.status(), self.ctx.store, self.ctx.settings, utcnow())

    def show_admin(self, notice: str = "", error: str = "") -> None:
        """The admin page: the admin data, and the week's GPU-hours per day with their chart."""
        status = self.ctx.controls.status()
        data = admin_data(status, self.ctx.store, self.ctx.settings, utcnow())
        self.finish(self.render_page("admin.html", data=data, infos=status.sessions, notice=notice, error=error,
                                     usage_chart=usage_chart(data["usage"]) if data["usage"] else "",
                                     freed_means=FREED_MEANS, waiting_means=WAITING_MEANS,
                                     refresh_s=min(60, max(5, round(self.ctx.settings.cycle_interval.total_seconds())))))


class OAuthCallback(HubOAuthCallbackHandler, RedactedLogs):
    def initialize(self, ctx: Context) -> None:
        self.hub_auth = ctx.hub_auth
