"""The service's web server (tornado, as JupyterHub and its services use).

As a hub-managed service with a `url`, JupyterHub routes `/services/<name>/` to it and
sets JUPYTERHUB_SERVICE_URL (where to listen) and JUPYTERHUB_SERVICE_PREFIX (the path
prefix the proxy keeps). Every page is served under the prefix, and `/metrics` also at
the root so Prometheus can scrape the pod directly.

`/metrics` carries counts only (no user names), like JupyterHub's own metrics with
`authenticate_prometheus = False`. `api/reclaims` needs a hub token with access to this
service (`access:services!service=<name>`); a user sees only their own reclaims.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlsplit

from jupyterhub.services.auth import HubAuth, HubAuthenticated
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado import web
from tornado.httpserver import HTTPServer

from .durations import parse_duration
from .metrics import Metrics
from .signals.base import parse_time
from .store import Store
from .trace import format_time


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


def make_app(metrics: Metrics, prefix: str = "/", store: Store | None = None,
             hub_auth: HubAuth | None = None) -> web.Application:
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    routes: list = [
        (prefix + "metrics", MetricsHandler, {"metrics": metrics}),
        (prefix + "health", HealthHandler),
    ]
    if store is not None and hub_auth is not None:
        routes.append((prefix + "api/reclaims", ReclaimsHandler, {"store": store, "hub_auth": hub_auth}))
    if prefix != "/":
        routes.append((r"/metrics", MetricsHandler, {"metrics": metrics}))
    return web.Application(routes)


def listen(app: web.Application, bind_url: str) -> HTTPServer:
    """Listen on the host and port of `bind_url` (http://HOST:PORT)."""
    parts = urlsplit(bind_url)
    if parts.scheme != "http" or not parts.port:
        raise ValueError(f"the service URL must be http://HOST:PORT, got {bind_url!r}")
    server = HTTPServer(app, xheaders=True)
    server.listen(parts.port, parts.hostname or "127.0.0.1")
    return server
