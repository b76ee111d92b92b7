"""Real HTTP fakes (aiohttp.web on 127.0.0.1, random ports) for the fault tests: the hub's
REST API, Prometheus' query API and single-user servers' kernel endpoints. Each has a
`mode` a test flips to inject a fault, and records the requests it received."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Callable

from aiohttp import web

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

    async def query(self, request: web.Request) -> web.Response:
        self._record(request)
        error = {"status": "error", "errorType": "unavailable", "error": "storage is not ready"}
        if self.mode == "http-503":
            return web.json_response(error, status=503)
        if self.mode == "status-error":
            return web.json_response(error)
        ts = self.clock().timestamp()
        result = [{"metric": {"namespace": ns, "pod": pod, "gpu": "0", "field": "util"},
                   "value": [ts, str(value)]} for (ns, pod), value in self.util.items()]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

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

    async def kernels_handler(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.mode == "hang":
            await self._hang()
        states = self.kernels.get(request.match_info["user"], ["idle"])
        return web.json_response([{"id": str(i), "name": "python3", "execution_state": s,
                                   "last_activity": "2026-01-05T09:00:00Z", "connections": 0}
                                  for i, s in enumerate(states)])

    async def terminals(self, request: web.Request) -> web.Response:
        self._record(request)
        if self.mode == "hang":
            await self._hang()
        return web.json_response([])

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/user/{user}/api/kernels", self.kernels_handler)
        app.router.add_get("/user/{user}/api/terminals", self.terminals)
        return app
