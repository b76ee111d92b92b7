"""What the service tests share: a hub that runs jupyterhub-gpu-reclaim as a managed
service with short timings, a webhook receiver for its notices, and readers of its
store and /metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim.launch import free_port
from jupyterhub_gpu_reclaim.store import Store

from .live import start_test_hub
from .store_reads import decisions_of

HERE = Path(__file__).parents[1] / "service"  # the hub configs of tests/service

# seconds; the defaults are 30 min / 60 min / 15 min
TIMINGS = {
    "never_used_warn_after": 30, "never_used_reclaim_after": 45,
    "idle_warn_after": 30, "idle_reclaim_after": 45,
    "warning_lead": 10, "stale_after": 10,
}
CPU_TIMEOUT = 30
# shorter still, for a scene where nothing has to start working before its first warning:
# the live test proves the wiring, the timings themselves are proven on the virtual clock
# (tests/service/test_service.py, tests/faults, tests/policy)
QUICK = {**TIMINGS, "never_used_warn_after": 10, "never_used_reclaim_after": 15,
         "idle_warn_after": 10, "idle_reclaim_after": 15, "warning_lead": 5, "timeout": 15}


class Webhook:
    """Collects the JSON documents POSTed to it (the service's webhook notifier)."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, session: str, event: str | None = None) -> list[dict]:
        return [m for m in self.received if m["session"] == session and (event is None or m["event"] == event)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_service_config(workdir: Path, sim, webhook: Webhook | None = None, *, dry_run: bool = False,
                         **overrides) -> tuple[Path, str]:
    """A gpu_reclaim_config.py in `workdir` (short timings, notices to the log and `webhook`,
    `overrides` on top): its path and the URL of the store it names."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{workdir / 'gpu_reclaim.sqlite'}"
    notifiers = [{"type": "log"}] + ([{"type": "webhook", "url": webhook.url}] if webhook else [])
    settings = {
        "timeout": CPU_TIMEOUT, "cull_every": 2, "namespace": "jhub",
        "kubeconfig": sim.info["kubeconfig"], "dcgm_exporter_urls": [sim.info["metrics"]],
        "store_url": store, "stop_timeout": 60, "dry_run": dry_run,
        "notifiers": notifiers, "admin_recipients": ["admin"], "hub_name": "Test Hub", **TIMINGS,
        **overrides,
    }
    config = workdir / "gpu_reclaim_config.py"
    config.write_text("c = get_config()\n" + "".join(f"c.GpuReclaim.{k} = {v!r}\n" for k, v in settings.items()))
    return config, store


def start_service_hub(workdir: Path, sim, webhook: Webhook | None = None, *, dry_run: bool = False,
                      hub_config: Path = HERE / "jupyterhub_config_service.py",
                      env: dict[str, str] | None = None, **overrides):
    """The hub (`hub_config`, with `env`), and in it the service configured by a
    gpu_reclaim_config.py (write_service_config)."""
    config, store = write_service_config(workdir, sim, webhook, dry_run=dry_run, **overrides)
    port = free_port()
    hub = start_test_hub(workdir, hub_config, sim,
                         env={"GPU_RECLAIM_SERVICE_PORT": str(port),
                              "GPU_RECLAIM_SERVICE_CONFIG": str(config), **(env or {})})
    hub.info.update(store=store, service_port=port)
    return hub


def metrics(hub) -> dict[tuple[str, tuple], float]:
    """The service's /metrics, read through the hub's proxy: {(name, labels): value}."""
    with urllib.request.urlopen(f"{hub.info['url']}/services/gpu-reclaim/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(values: dict, name: str, **labels) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def cycles(hub) -> float:
    """How many cycles the service has run (any result)."""
    return sum(v for (name, _), v in metrics(hub).items() if name == "jupyterhub_gpu_reclaim_cycles_total")


def latest_rule(hub, session: str) -> tuple[str, str] | None:
    with Store.open(hub.info["store"]) as store:
        decisions = decisions_of(store, session)
    return (decisions[-1][1].action, decisions[-1][1].rule) if decisions else None


async def until(check, timeout: float, what: str, interval: float = 0.5):
    """Await `check()` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(interval)


async def reclaimed_and_gone(hub, api, user: str, timeout: float):
    """The record of `user`'s default server stopped by a reclaim (within `timeout` s), once the
    hub says the server is gone."""
    def stopped():
        with Store.open(hub.info["store"]) as store:
            return next((r for r in store.reclaims() if r.session == f"{user}/" and r.outcome == "stopped"), None)

    async def gone():
        return await api.server(user) is None

    record = await until(stopped, timeout, f"{user}'s server reclaimed")
    await until(gone, 60, f"{user}'s server gone")
    return record
