"""HubStopper against a tiny scripted fake hub (aiohttp.web on 127.0.0.1, real HTTP)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from aiohttp import web

from jupyterhub_gpu_reclaim.service.hub_stopper import HubStopper

TOKEN = "s3cr3t-token-value"
FAST = dict(stop_timeout=0.5, poll_interval=0.02, retries=3, backoff=0.01, request_timeout=1.0)


class FakeHub:
    """Records every request; `delete` is a list of scripted answers (status, message),
    the last one repeating; `user` answers GET /users/{u} from the number of GETs so far."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.delete: list[tuple[int, str]] = [(204, "")]
        self.delete_delay = 0.0  # seconds the first DELETE hangs
        self.user = lambda n_gets, name: {"name": name, "servers": {}}
        self.gets = 0
        self.deletes = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append({"method": request.method, "raw_path": request.raw_path,
                              "path": request.path, "auth": request.headers.get("Authorization"),
                              "body": json.loads(body) if body else None})
        if request.method == "DELETE":
            self.deletes += 1
            if self.deletes == 1 and self.delete_delay:
                await asyncio.sleep(self.delete_delay)
            status, msg = self.delete[min(self.deletes - 1, len(self.delete) - 1)]
            if status >= 400:
                return web.json_response({"status": status, "message": msg}, status=status)
            return web.Response(status=status, content_type="text/plain")
        self.gets += 1
        model = self.user(self.gets, request.match_info["user"])
        if model is None:
            return web.json_response({"status": 404, "message": "Not Found"}, status=404)
        return web.json_response(model)

    @property
    def deletes_seen(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "DELETE"]


@pytest.fixture
async def hub():
    fake = FakeHub()
    app = web.Application()
    app.router.add_route("*", "/hub/api/users/{user}", fake.handle)
    app.router.add_route("DELETE", "/hub/api/users/{user}/server", fake.handle)
    app.router.add_route("DELETE", "/hub/api/users/{user}/servers/{server}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.api = f"http://127.0.0.1:{port}/hub/api"
    yield fake
    await runner.cleanup()


async def _stop(hub, user="alice", server="", **kw):
    opts = {**FAST, **kw}
    async with HubStopper(hub.api, TOKEN, **opts) as s:
        return await s.stop(user, server)


def _listed(name, pending="stop"):
    return {"name": "u", "servers": {name: {"name": name, "pending": pending, "ready": False}}}


async def test_204_then_verified(hub):
    r = await _stop(hub)
    assert (r.outcome, r.attempts) == ("stopped", 1)
    assert [q["method"] for q in hub.requests] == ["DELETE", "GET"]
    assert hub.requests[0]["path"] == "/hub/api/users/alice/server"
    assert hub.requests[0]["body"] is None


async def test_202_then_gone_after_three_polls(hub):
    hub.delete = [(202, "")]
    hub.user = lambda n, name: _listed("") if n <= 3 else {"name": name, "servers": {}}
    r = await _stop(hub)
    assert r.outcome == "stopped" and r.attempts == 1
    assert hub.gets == 4


async def test_named_server_with_remove_body(hub):
    hub.delete = [(202, "")]
    hub.user = lambda n, name: _listed("gpu") if n == 1 else {"name": name, "servers": {}}
    r = await _stop(hub, server="gpu", remove_named_servers=True)
    assert r.outcome == "stopped"
    d = hub.deletes_seen[0]
    assert d["path"] == "/hub/api/users/alice/servers/gpu" and d["body"] == {"remove": True}


async def test_named_server_without_remove_and_stopped_flag(hub):
    # a named server may stay listed with "stopped": true when not removed
    hub.user = lambda n, name: {"name": name, "servers": {"gpu": {"name": "gpu", "stopped": True}}}
    r = await _stop(hub, server="gpu")
    assert r.outcome == "stopped"
    assert hub.deletes_seen[0]["body"] is None


async def test_default_server_never_sends_remove(hub):
    await _stop(hub, remove_named_servers=True)
    assert hub.deletes_seen[0]["body"] is None  # hub: 400 "Cannot delete the default server"


@pytest.mark.parametrize("status,msg", [
    (404, "alice has no server named 'gpu'"),
    (404, "Not Found"),
    (400, "alice's server is not running"),
])
async def test_already_stopped(hub, status, msg):
    hub.delete = [(status, msg)]
    r = await _stop(hub, server="gpu")
    assert r.outcome == "already-stopped" and r.attempts == 1
    assert msg in r.detail
    assert hub.gets == 0


@pytest.mark.parametrize("status,msg", [
    (400, "Named servers are not enabled."),
    (400, "Cannot stop a server while it is being renamed"),
    (403, "Action is not authorized with current scopes; requires any of [delete:servers]"),
])
async def test_client_errors_fail_without_retry(hub, status, msg):
    hub.delete = [(status, msg)]
    r = await _stop(hub, server="gpu")
    assert r.outcome == "failed" and r.attempts == 1 and msg in r.detail


async def test_503_twice_then_204(hub):
    hub.delete = [(503, "busy"), (503, "busy"), (204, "")]
    r = await _stop(hub)
    assert (r.outcome, r.attempts) == ("stopped", 3)


async def test_always_503_fails(hub):
    hub.delete = [(503, "busy")]
    r = await _stop(hub, retries=3)
    assert r.outcome == "failed" and r.attempts == 4  # first try + 3 retries
    assert "503" in r.detail
    assert hub.gets == 0


async def test_timeout_is_retried(hub):
    hub.delete_delay = 0.5
    r = await _stop(hub, request_timeout=0.1)
    assert (r.outcome, r.attempts) == ("stopped", 2)


async def test_connection_refused_fails():
    async with HubStopper("http://127.0.0.1:9/hub/api", TOKEN, **{**FAST, "retries": 1}) as s:
        r = await s.stop("alice", "")
    assert r.outcome == "failed" and r.attempts == 2


async def test_202_forever_is_stuck(hub):
    hub.delete = [(202, "")]
    hub.user = lambda n, name: _listed("")
    r = await _stop(hub, stop_timeout=0.3)
    assert r.outcome == "stuck" and "0.3 s" in r.detail and "pending='stop'" in r.detail
    assert 0.25 <= r.seconds < 2


@pytest.mark.parametrize("model", [["alice"], {"name": "alice", "servers": ["", "gpu"]},
                                   {"name": "alice", "servers": {"": "stopping"}}])
async def test_a_malformed_user_model_is_never_taken_for_stopped(hub, model):
    hub.delete = [(202, "")]
    hub.user = lambda n, name: model
    r = await _stop(hub, stop_timeout=0.3)
    assert r.outcome == "stuck" and "the hub's user model cannot be read" in r.detail


async def test_user_deleted_counts_as_stopped(hub):
    hub.delete = [(202, "")]
    hub.user = lambda n, name: None if n > 1 else _listed("")
    assert (await _stop(hub)).outcome == "stopped"


async def test_pod_gone_waited_for(hub):
    calls = []

    async def pod_gone(user, server):
        calls.append((user, server))
        return len(calls) >= 3

    r = await _stop(hub, server="gpu", pod_gone=pod_gone)
    assert r.outcome == "stopped" and calls == [("alice", "gpu")] * 3


async def test_pod_gone_false_forever_is_stuck(hub):
    async def pod_gone(user, server):
        return False

    r = await _stop(hub, pod_gone=pod_gone, stop_timeout=0.2)
    assert r.outcome == "stuck" and "pod" in r.detail


async def test_pod_gone_not_checked_when_already_stopped(hub):
    hub.delete = [(404, "Not Found")]

    async def pod_gone(user, server):
        raise AssertionError("not called")

    assert (await _stop(hub, pod_gone=pod_gone)).outcome == "already-stopped"


@pytest.mark.parametrize("user,server,path", [
    ("a@b.c", "", "/hub/api/users/a%40b.c/server"),
    ("x y", "my gpu/1", "/hub/api/users/x%20y/servers/my%20gpu%2F1"),
])
async def test_names_are_quoted(hub, user, server, path):
    r = await _stop(hub, user=user, server=server)
    assert r.outcome == "stopped"
    d, g = hub.requests[0], hub.requests[1]
    assert d["raw_path"] == path  # exactly as quoted
    assert g["path"] == f"/hub/api/users/{user}"  # yarl may normalise "%40" to "@" here
    assert " " not in g["raw_path"]


async def test_token_in_header_never_logged(hub, caplog):
    caplog.set_level(logging.DEBUG)
    hub.delete = [(503, "busy"), (202, "")]
    hub.user = lambda n, name: _listed("") if n == 1 else {"name": name, "servers": {}}
    r = await _stop(hub)
    assert r.outcome == "stopped"
    assert {q["auth"] for q in hub.requests} == {f"token {TOKEN}"}
    assert any(rec.name == "jupyterhub_gpu_reclaim.service.hub_stopper" for rec in caplog.records)
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(HubStopper(hub.api, TOKEN))
