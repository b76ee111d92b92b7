"""`/metrics` (counts only, no user names) and `/health`: no authentication."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado import web

from ..service.metrics import Metrics


class MetricsHandler(web.RequestHandler):
    def initialize(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write(generate_latest(self.metrics.registry))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.write({"status": "ok"})
