"""The simulator's own HTTP endpoint (not part of the Kubernetes API):

- `GET /metrics`, `GET /nodes/{node}/metrics`: what dcgm-exporter would serve, for the
  whole cluster or one node (point Prometheus here);
- `GET /gpus`: every GPU, its holder and last sample (JSON);
- `POST /gpus/{namespace}/{pod}`: set a pod's GPU load, `{"utilization": 90, "seconds": 60,
  "memory_mib": 8000}`. Callers are the cluster's admin (the cluster token) or the pod
  itself (its own token, given to it in GPU_RECLAIM_SIM_GPU_TOKEN);
- `GET /healthz`.

It serves the node agent's `GpuFleet` (sim.nodeagent: its pods from its pod workers).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable

from aiohttp import web

from .gpu import TOKEN_ENV, URL_ENV
from .gpu.gpus import GpuFleet

log = logging.getLogger("gpu_reclaim_sim.control")


def pod_token(cluster_token: str, namespace: str, pod: str, uid: str) -> str:
    """A token that lets one pod set its own GPU load and nothing else."""
    return hmac.new(cluster_token.encode(), f"{namespace}/{pod}/{uid}".encode(), hashlib.sha256).hexdigest()


class ControlServer:
    """The endpoint of `gpus`, at `host:port` (0: a free one), and at the same port of each of
    `also` (other addresses of the machine); `token` is the admin's, and `pod_uid(namespace,
    pod)` the UID of a pod that runs here (None: no such pod)."""

    def __init__(self, gpus: GpuFleet, token: str, pod_uid: Callable[[str, str], str | None],
                 host: str = "127.0.0.1", port: int = 0, also: tuple[str, ...] = ()) -> None:
        self.fleet, self.token, self.pod_uid = gpus, token, pod_uid
        self.host, self.port, self.also = host, port, also
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.urls: dict[str, str] = {}  # each address's

    def pod_env(self, namespace: str, pod: str, uid: str) -> dict[str, str]:
        """What a GPU pod's processes need to call `use_gpu()`."""
        return {
            URL_ENV: f"{self.url}/gpus/{namespace}/{pod}",
            TOKEN_ENV: pod_token(self.token, namespace, pod, uid),
        }

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([
            web.get("/metrics", self.metrics),
            web.get("/nodes/{node}/metrics", self.metrics),
            web.get("/gpus", self.gpus),
            web.post("/gpus/{namespace}/{pod}", self.set_load),
            web.get("/healthz", self.healthz),
        ])
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        port = self._runner.addresses[0][1]
        for host in self.also:
            await web.TCPSite(self._runner, host, port).start()
        self.urls = {host: f"http://{host}:{port}" for host in (self.host, *self.also)}
        self.url = self.urls[self.host]

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        node = request.match_info.get("node")
        if node is not None and node not in self.fleet.gpus:
            raise web.HTTPNotFound(text=f"no node {node!r} with GPUs\n")
        return web.Response(body=self.fleet.metrics(node),
                            content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": "no-store"})

    async def gpus(self, request: web.Request) -> web.Response:
        return web.json_response(self.fleet.state())

    async def set_load(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["namespace"], request.match_info["pod"]
        uid = self.pod_uid(ns, name)
        if uid is None:
            return _error(404, f"pod {ns}/{name} not found")
        auth = request.headers.get("Authorization", "")
        token = auth.split(" ", 1)[1] if auth.lower().startswith(("bearer ", "token ")) else ""
        allowed = {self.token, pod_token(self.token, ns, name, uid)}
        if not token or not any(hmac.compare_digest(token, t) for t in allowed):
            return _error(403, "a cluster token or the pod's own token is required")
        try:
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            unknown = set(body) - {"utilization", "seconds", "memory_mib"}
            if unknown:
                raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
            utilization = float(body.get("utilization", 100))
            seconds = float(body.get("seconds", 60))
            memory = body.get("memory_mib")
            load = self.fleet.set_load(ns, name, utilization, seconds, int(memory) if memory is not None else None)
        except KeyError as e:
            return _error(409, str(e.args[0]))
        except (ValueError, TypeError) as e:
            return _error(400, str(e))
        log.info("GPU load of %s/%s: %.0f%% for %.0f s", ns, name, utilization, seconds)
        return web.json_response({"utilization": load.utilization, "seconds": seconds,
                                  "memory_mib": load.memory_mib})


def _error(code: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=code)
