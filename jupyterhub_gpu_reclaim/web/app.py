"""The tornado application: its routes and settings (cookie secret and cookie policy, access
log without secrets), and listening on the service URL with a small body limit."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tornado import web
from tornado.httpserver import HTTPServer

from .api import (AdminActionsApi, AdminCandidatesApi, AdminHistoryApi, AdminQueueApi, AdminUsageApi, AdminWhatIfApi,
                  IntentApi, QueueApi, ReclaimsApi, SessionsApi, StopApi)
from .base import MAX_BODY, Context, OAuthCallback, redacted_uri
from .monitoring import HealthHandler, MetricsHandler
from .pages import (AdminActionForm, AdminPage, AdminReportPage, AdminWhatIfForm, EmbedBanner, EmbedHome,
                    KeepaliveForm, KeepalivePage, ReclaimSeenForm, StopForm, UserPage)
from .paths import static_dir

log = logging.getLogger("jupyterhub_gpu_reclaim.web")


def _log_request(handler: web.RequestHandler) -> None:
    """The access log: method, path and query with secret values hidden (OAuth codes go there)."""
    status = handler.get_status()
    level = logging.DEBUG if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    log.log(level, "%d %s %s %.1f ms", status, handler.request.method, redacted_uri(handler.request),
            1000 * handler.request.request_time())


def _cookie_secret(path: str) -> bytes:
    if path:
        data = Path(path).read_bytes().strip()
        try:
            return bytes.fromhex(data.decode("ascii"))
        except ValueError:
            return data
    return secrets.token_bytes(32)


def make_app(ctx: Context) -> web.Application:
    """The routes: /metrics and /health, and the pages and the API when `ctx` has the store
    and the hub's auth; the cookie secret from the settings' --cookie-secret-file."""
    prefix = ctx.prefix
    routes: list = [
        (prefix + "metrics", MetricsHandler, {"metrics": ctx.metrics}),
        (prefix + "health", HealthHandler),
    ]
    if ctx.store is not None and ctx.hub_auth is not None:
        # the login cookie (and OAuth's state cookie) go only with same-site requests and
        # top-level navigations, which the OAuth redirects from the hub are; admins may override
        ctx.hub_auth.cookie_options = {"samesite": "Lax", **ctx.hub_auth.cookie_options}
        c = {"ctx": ctx}
        session = r"([^/]+)/([^/]*)"
        routes += [
            (prefix + "api/reclaims", ReclaimsApi, c),
            (prefix + "api/queue", QueueApi, c),
            (prefix, UserPage, c),
            (prefix + "keepalive", KeepalivePage, c),
            (prefix + "sessions/keepalive", KeepaliveForm, c),
            (prefix + "sessions/stop", StopForm, c),
            (prefix + "embed/home", EmbedHome, c),
            (prefix + "embed/home/seen", ReclaimSeenForm, c),
            (prefix + "embed/banner", EmbedBanner, c),
            (prefix + "admin", AdminPage, c),
            (prefix + "admin/action", AdminActionForm, c),
            (prefix + "admin/whatif", AdminWhatIfForm, c),
            (prefix + "admin/report", AdminReportPage, c),
            (prefix + "api/sessions", SessionsApi, c),
            (prefix + f"api/sessions/{session}/intent", IntentApi, c),
            (prefix + f"api/sessions/{session}/stop", StopApi, c),
            (prefix + "api/admin/candidates", AdminCandidatesApi, c),
            (prefix + "api/admin/queue", AdminQueueApi, c),
            (prefix + "api/admin/usage", AdminUsageApi, c),
            (prefix + "api/admin/history", AdminHistoryApi, c),
            (prefix + "api/admin/actions", AdminActionsApi, c),
            (prefix + "api/admin/whatif", AdminWhatIfApi, c),
            (prefix + "oauth_callback", OAuthCallback, c),
            (prefix + "static/(.*)", web.StaticFileHandler, {"path": str(static_dir())}),
        ]
    if prefix != "/":
        routes.append((r"/metrics", MetricsHandler, {"metrics": ctx.metrics}))
        routes.append((prefix.rstrip("/"), web.RedirectHandler, {"url": prefix}))
    settings: dict[str, Any] = {"cookie_secret": _cookie_secret(ctx.settings.cookie_secret_file),
                                "log_function": _log_request, "xsrf_cookie_kwargs": {"samesite": "Lax"}}
    return web.Application(routes, **settings)


def listen(app: web.Application, bind_url: str) -> HTTPServer:
    """Listen on the host and port of `bind_url` (http://HOST:PORT)."""
    parts = urlsplit(bind_url)
    if parts.scheme != "http" or not parts.port:
        raise ValueError(f"the service URL must be http://HOST:PORT, got {bind_url!r}")
    # a larger body is refused unread (400, connection closed); the pages' handlers answer a
    # declared Content-Length beyond it with a 413 of their own before that (base.DRAINED_MAX)
    server = HTTPServer(app, xheaders=True, max_body_size=MAX_BODY, max_buffer_size=4 * MAX_BODY)
    server.listen(parts.port, parts.hostname or "127.0.0.1")
    return server
