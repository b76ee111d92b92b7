"""The service's web server (tornado, as JupyterHub and its services use).

As a hub-managed service with a `url`, JupyterHub routes `/services/<name>/` to it and
sets JUPYTERHUB_SERVICE_URL (where to listen) and JUPYTERHUB_SERVICE_PREFIX (the path
prefix the proxy keeps). Every page is served under the prefix, and `/metrics` also at
the root so Prometheus can scrape the pod directly.

`/metrics` carries counts only (no user names), like JupyterHub's own metrics with
`authenticate_prometheus = False`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado import web
from tornado.httpserver import HTTPServer

from .metrics import Metrics


class MetricsHandler(web.RequestHandler):
    def initialize(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write(generate_latest(self.metrics.registry))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.write({"status": "ok"})


def make_app(metrics: Metrics, prefix: str = "/") -> web.Application:
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    routes: list = [
        (prefix + "metrics", MetricsHandler, {"metrics": metrics}),
        (prefix + "health", HealthHandler),
    ]
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
