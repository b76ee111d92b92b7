"""Real HTTP fakes (aiohttp.web on 127.0.0.1, random ports) for the fault tests: the hub's
REST API, Prometheus' query API, single-user servers' kernel endpoints, dcgm-exporter's
/metrics and the Kubernetes API's pod list and watch. Each has a `mode` a test flips to
inject a fault, and records the requests it received; `raw` bodies replace an answer
with any bytes (malformed, not JSON, huge), answered 200 OK."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any, Callable

from aiohttp import web

from .clock import START

PAGINATION = "application/jupyterhub-pagination+json"


def iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


class Fake:
    """Common: `mode`, the request log, and `release` ending hung requests."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[tuple[str, str]] = []
        self.auth: set[str | None] = set()
        self.release = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    def _record(self, request: web.Request) -> None:
        self.requests.append((request.method, request.path))
        self.auth.add(request.headers.get("Authorization"))

    async def _hang(self) -> None:
        try:
            await asyncio.wait_for(self.release.wait(), 30)
        except asyncio.TimeoutError:
            pass

    async def start(self) -> "Fake":
        self.runner, self.url = await serve(self.app())
        return self

    async def close(self) -> None:
        self.release.set()
        if self.runner is not None:
            await self.runner.cleanup()

    def app(self) -> web.Application:  # pragma: no cover - overridden
        raise NotImplementedError


class FakeHubAPI(Fake):
    """`users[name]` is a user model whose `servers` maps names to server models.

    mode "ok" | "500" | "hang" (GET requests); delete_mode "204" (the stop finishes at
    once) | "202" (the stop stays pending: the server stays listed with pending="stop")."""

    def __init__(self) -> None:
        super().__init__()
        self.users: dict[str, dict] = {}
        self.delete_mode = "204"
        self.raw_listing: bytes | None = None  # the body of GET /users instead of the users

    @property
    def api(self) -> str:
        return self.url + "/hub/api"

    def add_server(self, user: str, name: str = "", *, started: dt.datetime,
                   last_activity: dt.datetime | None = None, admin: bool = False) -> str:
        model = self.users.setdefault(user, {
            "kind": "user", "name": user, "admin": admin, "groups": [], "servers": {},
            "created": iso(started - dt.timedelta(days=30)), "last_activity": iso(last_activity)})
        model["servers"][name] = {
            "name": name, "ready": True, "pending": None, "stopped": False,
            "started": iso(started), "last_activity": iso(last_activity),
            "url": f"/user/{user}/" + (f"{name}/" if name else ""), "user_options": {}}
        return f"{user}/{name}"

    def finish_stop(self, user: str, name: str = "") -> None:
        """The hub's pending stop finally completes."""
        self.users[user]["servers"].pop(name, None)

    @property
    def deletes(self) -> list[str]:
        return [path for method, path in self.requests if method == "DELETE"]

    async def _fault(self) -> web.Response | None:
        if self.mode == "500":
            return web.json_response({"status": 500, "message": "Internal Server Error"}, status=500)
        if self.mode == "hang":
            await self._hang()
        return None

    async def root(self, request: web.Request) -> web.Response:
        self._record(request)
        return await self._fault() or web.json_response({"version": "5.3.0"})

    async def list_users(self, request: web.Request) -> web.Response:
        self._record(request)
        fault = await self._fault()
        if fault is not None:
            return fault
        if request.headers.get("Accept") != PAGINATION:
            return web.json_response({"status": 400, "message": "expected pagination"}, status=400)
        if self.raw_listing is not None:
            return web.Response(body=self.raw_listing, content_type=PAGINATION)
        state = request.query.get("state")
        items = []
        for model in self.users.values():
            servers = model["servers"]
            if state == "ready" and not servers:
                continue
            if state == "inactive" and servers:
                continue
            items.append(model)
        return web.json_response({"items": items, "_pagination": {
            "offset": 0, "limit": 200, "total": len(items), "next": None}})

    async def get_user(self, request: web.Request) -> web.Response:
        self._record(request)
        model = self.users.get(request.match_info["user"])
        if model is None:
            return web.json_response({"status": 404, "message": "Not Found"}, status=404)
        return web.json_response(model)

    async def delete_server(self, request: web.Request) -> web.Response:
        self._record(request)
        model = self.users.get(request.match_info["user"])
        if model is None:
            return web.json_response({"status": 404, "message": "Not Found"}, status=404)
        spec = model["servers"].get("")
        if spec is None:
            return web.Response(status=204)  # not running: nothing to do
        if self.delete_mode == "202":
            spec.update(pending="stop", ready=False)
            return web.Response(status=202)
        model["servers"].pop("")
        return web.Response(status=204)

    async def delete_user(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.users.pop(request.match_info["user"], None) is None:
            return web.json_response({"status": 404, "message": "Not Found"}, status=404)
        return web.Response(status=204)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/hub/api/", self.root)
        app.router.add_get("/hub/api/users", self.list_users)
        app.router.add_get("/hub/api/users/{user}", self.get_user)
        app.router.add_delete("/hub/api/users/{user}", self.delete_user)
        app.router.add_delete("/hub/api/users/{user}/server", self.delete_server)
        return app


class FakePrometheus(Fake):
    """`util[(namespace, pod)]` = percent of its one GPU, stamped with `clock()`.
    mode "ok" | "http-503" | "status-error"."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        super().__init__()
        self.clock = clock
        self.util: dict[tuple[str, str], float] = {}
        self.series: dict[tuple[str, str], Any] = {}  # a pod's series as given, in place of util's
        self.raw: bytes | None = None  # the whole answer

    async def query(self, request: web.Request) -> web.Response:
        self._record(request)
        error = {"status": "error", "errorType": "unavailable", "error": "storage is not ready"}
        if self.mode == "http-503":
            return web.json_response(error, status=503)
        if self.mode == "status-error":
            return web.json_response(error)
        if self.raw is not None:
            return web.Response(body=self.raw, content_type="application/json")
        ts = self.clock().timestamp()
        result = []
        for (ns, pod), value in self.util.items():
            result.append(self.series[(ns, pod)] if (ns, pod) in self.series else
                          {"metric": {"namespace": ns, "pod": pod, "gpu": "0", "field": "util"},
                           "value": [ts, str(value)]})
        return web.Response(text=json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}),
                            content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/query", self.query)
        return app


class FakeServers(Fake):
    """The single-user servers' `/user/{name}/api/kernels` and `/api/terminals`.
    mode "ok" | "hang"; `kernels[name]` the execution states."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: dict[str, list[str]] = {}
        self.raw: dict[str, bytes] = {}  # "alice/kernels" or "alice/terminals": that answer's body

    def _raw(self, request: web.Request, endpoint: str) -> web.Response | None:
        body = self.raw.get(f"{request.match_info['user']}/{endpoint}")
        return None if body is None else web.Response(body=body, content_type="application/json")

    async def kernels_handler(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.mode == "hang":
            await self._hang()
        raw = self._raw(request, "kernels")
        if raw is not None:
            return raw
        states = self.kernels.get(request.match_info["user"], ["idle"])
        return web.json_response([{"id": str(i), "name": "python3", "execution_state": s,
                                   "last_activity": iso(START), "connections": 0}
                                  for i, s in enumerate(states)])

    async def terminals(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.mode == "hang":
            await self._hang()
        return self._raw(request, "terminals") or web.json_response([])

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/user/{user}/api/kernels", self.kernels_handler)
        app.router.add_get("/user/{user}/api/terminals", self.terminals)
        return app


class FakeDcgmExporter(Fake):
    """dcgm-exporter's `/metrics` in Kubernetes mode: one GPU per pod of `util`, with the
    labels the real exporter writes (and the simulated one: gpu_reclaim_sim/gpu/gpus.py).
    `lines[(namespace, pod)]` replaces that pod's lines; `raw` the whole text."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node
        self.util: dict[tuple[str, str], float] = {}
        self.lines: dict[tuple[str, str], list[str]] = {}
        self.raw: bytes | None = None

    async def metrics(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.raw is not None:
            return web.Response(body=self.raw, content_type="text/plain")
        out = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        for i, ((ns, pod), util) in enumerate(self.util.items()):
            out += self.lines.get((ns, pod), [
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{self.node}-{i}",device="nvidia{i}",'
                f'modelName="NVIDIA A100-SXM4-40GB",Hostname="{self.node}",DCGM_FI_DRIVER_VERSION="550.54.15",'
                f'container="notebook",namespace="{ns}",pod="{pod}"}} {util:g}'])
        return web.Response(text="\n".join(out) + "\n", content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        return app


class FakeKubeAPI(Fake):
    """The Kubernetes API's pods of one namespace as kubernetes-asyncio reads them: a list
    (`GET /api/v1/namespaces/{ns}/pods`, one page, with the list's resourceVersion) and a
    watch (`?watch=True&resourceVersion=N`: the events after N as JSON lines, then the
    live ones, until `timeoutSeconds`). `put()` and `delete()` change a pod as the API
    would (any object, malformed ones too); `send_line()` streams a raw line to the
    watchers; `raw_list` replaces the list's body."""

    def __init__(self) -> None:
        super().__init__()
        self.pods: dict[str, Any] = {}
        self.rv = 1
        self.events: list[tuple[int, bytes]] = []
        self.raw_list: bytes | None = None
        self._changed = asyncio.Condition()

    def kubeconfig(self) -> str:
        return json.dumps({  # YAML is a superset of JSON
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-kube-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]})

    async def _event(self, line: bytes) -> None:
        self.rv += 1
        self.events.append((self.rv, line))
        async with self._changed:
            self._changed.notify_all()

    async def put(self, name: str, pod: Any) -> None:
        kind = "MODIFIED" if name in self.pods else "ADDED"
        if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
            pod["metadata"]["resourceVersion"] = str(self.rv + 1)
        self.pods[name] = pod
        await self._event(json.dumps({"type": kind, "object": pod}).encode())

    async def delete(self, name: str) -> None:
        pod = self.pods.pop(name)
        await self._event(json.dumps({"type": "DELETED", "object": pod}).encode())

    async def send_line(self, line: bytes) -> None:
        await self._event(line)

    async def pods_handler(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if request.query.get("watch", "").lower() in ("true", "1"):
            return await self._watch(request)
        if self.raw_list is not None:
            return web.Response(body=self.raw_list, content_type="application/json")
        return web.json_response({"kind": "PodList", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(self.rv)}, "items": list(self.pods.values())})

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        deadline = asyncio.get_running_loop().time() + float(request.query.get("timeoutSeconds") or 30)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            while True:
                for rv, line in [e for e in self.events if e[0] > since]:
                    await response.write(line + b"\n")
                    since = rv
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0 or self.release.is_set():
                    break
                async with self._changed:
                    try:
                        await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
                    except asyncio.TimeoutError:
                        pass
        except ConnectionResetError:  # the watcher went away
            pass
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self.pods_handler)
        return app
