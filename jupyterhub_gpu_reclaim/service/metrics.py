"""The service's own Prometheus metrics, named like JupyterHub's (`jupyterhub_` prefix,
base units, `_total` counters). One registry per service instance, so tests and the
benchmark can run several side by side; `/metrics` (web/monitoring.py) serves `Metrics.registry`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "jupyterhub_gpu_reclaim"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.sessions = Gauge(
            f"{PREFIX}_sessions", "Ready servers at the last cycle, by GPU or not, decision and rule",
            ["gpu", "action", "rule"], registry=r)
        self.holds = Gauge(
            f"{PREFIX}_holds", "Sessions held at the last cycle (never reclaimed on missing data), by reason",
            ["reason"], registry=r)
        self.idle_gpus = Gauge(
            f"{PREFIX}_idle_gpus", "GPUs held by sessions whose GPUs are idle, at the last cycle", registry=r)
        self.idle_gpu_hours = Gauge(
            f"{PREFIX}_idle_gpu_hours",
            "GPU-hours held idle by the current idle episodes (GPUs x time since the episode began)",
            registry=r)
        self.pending_gpus = Gauge(
            f"{PREFIX}_pending_gpus", "GPUs requested by pods waiting for nvidia.com/gpu", registry=r)
        self.warnings = Counter(
            f"{PREFIX}_warnings", "Warnings sent, by rule", ["rule"], registry=r)
        self.reclaims = Counter(
            f"{PREFIX}_reclaims",
            "Reclaims (stops through the hub API), by rule and outcome (stopped, stuck, failed, "
            "already-stopped; dry-run: decided, not done)", ["rule", "outcome"], registry=r)
        self.reclaimed_gpus = Counter(
            f"{PREFIX}_reclaimed_gpus", "GPUs freed by reclaims", registry=r)
        self.stuck_stops = Gauge(
            f"{PREFIX}_stuck_stops", "Stops the hub accepted but did not finish in time, now", registry=r)
        self.users_deleted = Counter(
            f"{PREFIX}_users_deleted", "Users deleted by --cull-users", registry=r)
        self.signal_errors = Counter(
            f"{PREFIX}_signal_errors", "Failures to read a signal, by source", ["source"], registry=r)
        self.notification_errors = Counter(
            f"{PREFIX}_notification_errors", "Notifications a channel failed to send, by channel",
            ["notifier"], registry=r)
        self.cycle_duration = Histogram(
            f"{PREFIX}_cycle_duration_seconds", "Time of one reclaim cycle (signals, decisions, actions begun)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60), registry=r)
        self.session_errors = Counter(
            f"{PREFIX}_session_errors",
            "Unexpected errors while observing or deciding one session (the session is held)", registry=r)
        self.cycles = Counter(
            f"{PREFIX}_cycles", "Cycles run, by result: ok, skipped-hub (the hub's listing "
            "failed: nothing decided), degraded-pods (the pod list failed: decided with the last one read, "
            "GPU sessions held), error (the cycle raised)", ["result"], registry=r)
        self.last_cycle = Gauge(
            f"{PREFIX}_last_cycle_timestamp_seconds",
            "When the last cycle ended, whatever its result (Unix time)", registry=r)
        self.last_successful_cycle = Gauge(
            f"{PREFIX}_last_successful_cycle_timestamp_seconds",
            "When the last cycle with result ok ended (Unix time); the service's start before the first",
            registry=r)
        self.cycle_interval = Gauge(
            f"{PREFIX}_cycle_interval_seconds", "The configured time between cycles (--cull-every)", registry=r)
        self.dry_run = Gauge(
            f"{PREFIX}_dry_run", "1 when the service runs in dry-run mode (decides, stops nothing)", registry=r)
