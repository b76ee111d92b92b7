"""Kernel probes and their credential against tiny aiohttp servers on 127.0.0.1 playing
hostile user servers (redirects, cookies, refusals, stalls) and, where the real hub cannot
be made to misbehave, a hub's token API. The same against the real hub:
tests/service/test_probe_credentials.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from jupyterhub_gpu_reclaim.signals.http_source import SignalError
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
from jupyterhub_gpu_reclaim.signals.probe_token_client import (PROBE_NOTE, NoProbeCredential, ProbeTokens,
                                                         identify_scopes, probe_scope)

from ..support.signal_inputs import Server

SERVICE_TOKEN = "service-token-must-stay-at-the-hub"


@pytest.fixture
async def servers():
    made: list[Server] = []

    async def make() -> Server:
        s = Server()
        made.append(s)
        return s

    yield make
    for s in made:
        await s.stop()


class MintingCredentials:
    """Gives t1, t2, ... (a new one after each rejection) and records the calls."""

    def __init__(self) -> None:
        self.n = 0
        self.calls: list[tuple[str, str]] = []
        self.rejected_tokens: list[str] = []
        self.current: dict[str, str] = {}

    async def token(self, user: str, server: str) -> str:
        self.calls.append((user, server))
        if user not in self.current:
            self.n += 1
            self.current[user] = f"t{self.n}"
        return self.current[user]

    async def rejected(self, user: str, server: str, token: str) -> None:
        self.rejected_tokens.append(token)
        self.current.pop(user, None)


def user_server(server: Server, user: str, handler) -> None:
    async def recorded(request: web.Request) -> web.StreamResponse:
        server.requests.append(request)
        return await handler(request)

    server.app.router.add_get(f"/user/{user}/api/kernels", recorded)
    server.app.router.add_get(f"/user/{user}/api/terminals", recorded)


async def empty(request: web.Request) -> web.Response:
    return web.json_response([])


async def test_without_a_credential_there_is_no_request(servers):
    server = await servers()
    user_server(server, "alice", empty)
    await server.start()
    async with KernelSignal(None) as ks:
        with pytest.raises(NoProbeCredential) as err:
            await ks.probe("alice", "", "/user/alice/", server.url)
    assert err.value.source == "kernels" and "kernel_probe_credential" in err.value.message
    assert server.requests == []


async def test_a_redirect_is_not_followed(servers):
    """A user server that redirects the probe elsewhere gets an error, not the token sent on."""
    elsewhere = await servers()
    user_server(elsewhere, "alice", empty)
    await elsewhere.start()
    hostile = await servers()

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{elsewhere.url}{request.path}")

    user_server(hostile, "alice", redirect)
    await hostile.start()
    async with KernelSignal(MintingCredentials()) as ks:
        with pytest.raises(SignalError) as err:
            await ks.probe("alice", "", "/user/alice/", hostile.url)
    assert err.value.status == 302
    assert len(hostile.requests) == 2 and elsewhere.requests == []


async def test_no_cookie_is_ever_sent(servers):
    """A cookie one server sets comes back neither to it nor to another user's server."""
    server = await servers()

    async def with_cookie(request: web.Request) -> web.Response:
        response = web.json_response([])
        response.set_cookie("planted", "by-alice", path="/")
        return response

    user_server(server, "alice", with_cookie)
    user_server(server, "bob", empty)
    await server.start()
    credentials = MintingCredentials()
    # by name, as the proxy's public URL: a client's cookie jar keeps no cookies of IP hosts
    async with KernelSignal(credentials) as ks:
        for user in ("alice", "alice", "bob"):
            assert await ks.probe(user, "", f"/user/{user}/", server.url.replace("127.0.0.1", "localhost")) == ([], [])
    assert len(server.requests) == 6
    assert all("Cookie" not in r.headers for r in server.requests)
    # each server got its own user's token only
    assert {(r.path.split("/")[2], r.headers["Authorization"]) for r in server.requests} == {
        ("alice", "token t1"), ("bob", "token t2")}


async def test_a_refused_token_is_replaced_once(servers):
    server = await servers()
    refuse = {"t1"}

    async def handler(request: web.Request) -> web.Response:
        if request.headers["Authorization"].split()[1] in refuse:
            return web.json_response({"message": "Forbidden"}, status=403)
        return web.json_response([])

    user_server(server, "alice", handler)
    await server.start()
    credentials = MintingCredentials()
    async with KernelSignal(credentials) as ks:
        # the user revoked t1: t2 is minted and the probe works
        assert await ks.probe("alice", "", "/user/alice/", server.url) == ([], [])
        assert credentials.rejected_tokens == ["t1"]
        # a server that refuses every token: one new token per probe, then the error
        refuse.update({"t2", "t3"})
        with pytest.raises(SignalError) as err:
            await ks.probe("alice", "", "/user/alice/", server.url)
    assert err.value.status == 403
    assert credentials.rejected_tokens == ["t1", "t2"]  # t3 is kept: the next probe tries it first


async def test_a_stalling_server_does_not_hold_up_other_probes_tokens(servers):
    """With one probe at a time, a server that never answers holds its slot until the
    timeout, but the next server's token is minted meanwhile (minting is outside the
    probes' semaphore) and its probe runs once the slot frees."""
    server = await servers()
    arrived, release = asyncio.Event(), asyncio.Event()

    async def stall(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.json_response([])

    user_server(server, "slow", stall)
    user_server(server, "bob", empty)
    await server.start()
    credentials = MintingCredentials()
    async with KernelSignal(credentials, timeout=30, concurrency=1) as ks:
        slow = asyncio.create_task(ks.probe("slow", "", "/user/slow/", server.url))
        await arrived.wait()
        bob = asyncio.create_task(ks.probe("bob", "", "/user/bob/", server.url))
        while ("bob", "") not in credentials.calls:
            await asyncio.sleep(0.01)
        assert not slow.done() and not bob.done()  # bob's token is there; slow still stalls
        release.set()
        assert await bob == ([], []) and await slow == ([], [])


# --- ProbeTokens against a hub's token API --------------------------------------------


class TokenAPI:
    """JupyterHub's `POST /users/{name}/tokens` and `DELETE /users/{name}/tokens/{id}` as
    JupyterHub 6 answers them (apihandlers/users.py: 201 with the token model and `token`;
    204; 403 when the requester lacks `tokens`), with `scopes_extra` added to the model's
    scopes to play a hub that gives more than asked; and `GET /user` with the service's
    `own_scopes`. The probe-token API (`/gpu-reclaim/users/...`, spawner/probe_tokens.py)
    answers the same; `paths` records which one was asked, and its `GET /gpu-reclaim/tokens`
    answers `listed`."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.status = 201
        self.scopes_extra: list[str] = []
        self.own_scopes = ["list:users", "custom:gpu-reclaim:probe-tokens"]
        self.posts: list[dict] = []
        self.paths: list[str] = []
        self.deleted: list[str] = []
        self.listed: object = {"api_tokens": []}
        for api in ("/hub/api/users", "/hub/api/gpu-reclaim/users"):
            server.app.router.add_post(api + "/{name}/tokens", self.post)
            server.app.router.add_delete(api + "/{name}/tokens/{id}", self.delete)
        server.app.router.add_get("/hub/api/user", self.whoami)
        server.app.router.add_get("/hub/api/gpu-reclaim/tokens", self.list)

    async def list(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"token {SERVICE_TOKEN}"
        self.paths.append(request.path)
        return web.json_response(self.listed)

    async def whoami(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"token {SERVICE_TOKEN}"
        return web.json_response({"kind": "service", "name": "gpu-reclaim", "scopes": self.own_scopes})

    async def post(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"token {SERVICE_TOKEN}"
        body = await request.json()
        self.posts.append(body)
        self.paths.append(request.path)
        name = request.match_info["name"]
        if self.status == 403:
            return web.json_response({"status": 403, "message": f"Service {name} not found or no "
                                      "permissions to generate tokens"}, status=403)
        n = len(self.posts)
        scopes = sorted(set(body["scopes"]) | identify_scopes(name) | set(self.scopes_extra))
        return web.json_response({"user": name, "id": f"a{n}", "kind": "api_token", "roles": [],
                                  "scopes": scopes, "created": "2026-01-01T00:00:00.000000Z",
                                  "last_activity": None, "expires_at": "2026-01-01T01:00:00.000000Z",
                                  "note": body["note"], "session_id": None, "oauth_client": "JupyterHub",
                                  "token": f"minted-{n}"}, status=201)

    async def delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.match_info["id"])
        self.paths.append(request.raw_path)
        return web.Response(status=204)


@pytest.fixture
async def hub(servers):
    server = await servers()
    api = TokenAPI(server)
    await server.start()
    return api


async def test_a_token_with_other_scopes_than_asked_is_deleted_unused(hub, caplog):
    hub.scopes_extra = ["access:servers!user=alice"]
    tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
    caplog.set_level(logging.WARNING, "jupyterhub_gpu_reclaim.signals.probe_token_client")
    for _ in range(2):
        with pytest.raises(NoProbeCredential) as err:
            await tokens.token("alice", "")
        assert "other than asked" in err.value.message
    await tokens.close()
    assert hub.posts[0] == {"scopes": [probe_scope("alice", "")], "expires_in": 3600, "note": PROBE_NOTE}
    assert probe_scope("alice", "") == "access:servers!server=alice/"
    assert sorted(hub.deleted) == ["a1", "a2"]
    assert len(caplog.records) == 1  # once per cause, not per attempt


async def test_a_role_without_tokens_means_no_probe_logged_once(hub, caplog):
    hub.status, hub.own_scopes = 403, ["list:users"]
    caplog.set_level(logging.INFO, "jupyterhub_gpu_reclaim.signals.probe_token_client")
    tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
    async with KernelSignal(tokens) as ks:
        for user in ("alice", "bob", "alice"):
            with pytest.raises(NoProbeCredential) as err:
                await ks.probe(user, "", f"/user/{user}/", "http://127.0.0.1:9")  # never reached
            assert "HTTP 403" in err.value.message and "`tokens`" in err.value.message
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        hub.status = 201  # fixed: minted again, said once; a new outage is logged again
        assert await tokens.token("alice", "") == "minted-4"
        hub.status = 403
        with pytest.raises(NoProbeCredential):
            await tokens.token("carol", "")
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
    assert SERVICE_TOKEN not in caplog.text
    assert hub.deleted == ["a4"]  # closing deleted the one token it had


async def test_an_unfiltered_tokens_scope_is_warned_of_once(hub, caplog):
    """A service whose role still holds plain `tokens` (worth an admin's token) mints through
    the hub's token API, and says once what that role is worth; one with the probe-token
    scope mints through its API and says nothing."""
    caplog.set_level(logging.WARNING, "jupyterhub_gpu_reclaim.signals.probe_token_client")
    hub.own_scopes = ["list:users", "tokens"]
    tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
    for user in ("alice", "bob"):
        await tokens.token(user, "")
    await tokens.close()
    assert hub.paths == ["/hub/api/users/alice/tokens", "/hub/api/users/bob/tokens",
                         "/hub/api/users/alice/tokens/a1", "/hub/api/users/bob/tokens/a2"]
    (warning,) = caplog.records
    assert "`tokens` without a filter" in warning.getMessage() and "a hub admin's" in warning.getMessage()

    caplog.clear()
    hub.paths.clear()
    for scopes in (["custom:gpu-reclaim:probe-tokens"], ["custom:gpu-reclaim:probe-tokens!group=gpu", "tokens!user=x"]):
        hub.own_scopes = scopes
        tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
        await tokens.token("alice", "")
        await tokens.close()
    assert hub.paths == [p for n in (3, 4) for p in ("/hub/api/gpu-reclaim/tokens", "/hub/api/gpu-reclaim/users/alice/tokens",
                                                     f"/hub/api/gpu-reclaim/users/alice/tokens/a{n}")]
    assert not caplog.records


async def test_tokens_an_earlier_run_left_are_deleted_before_the_first_mint(hub, caplog):
    """The sweep at start (the real hub: tests/service/test_probe_credentials.py): every probe
    token the probe-token API lists is deleted before this run mints one; a listing that
    cannot be read is said once and minting goes on (those tokens expire by themselves)."""
    caplog.set_level(logging.INFO, "jupyterhub_gpu_reclaim.signals.probe_token_client")
    hub.listed = {"api_tokens": [{"user": "alice", "id": "a7"}, {"user": "b/ob", "id": "a8"}]}
    tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
    await tokens.check_scopes()
    assert await tokens.token("alice", "") == "minted-1"
    assert hub.paths[:4] == ["/hub/api/gpu-reclaim/tokens", "/hub/api/gpu-reclaim/users/alice/tokens/a7",
                             "/hub/api/gpu-reclaim/users/b%2Fob/tokens/a8", "/hub/api/gpu-reclaim/users/alice/tokens"]
    assert "deleting 2 kernel-probe token(s) left by an earlier run" in caplog.text
    await tokens.close()

    for listed in ({"api_tokens": [{"user": "alice", "id": 7}]}, ["a7"], {"api_tokens": [{"id": "a7"}]}):
        hub.listed, hub.deleted = listed, []
        caplog.clear()
        tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
        assert (await tokens.token("alice", "")).startswith("minted-")
        await tokens.close()
        assert hub.deleted == [hub.deleted[-1]]  # only the token it minted itself
        (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
        assert "left by an earlier run could not be listed" in warning.getMessage()


async def test_unreadable_own_scopes_mean_no_probe(hub, caplog):
    hub.own_scopes = "tokens"  # not a list
    tokens = ProbeTokens(hub.server.url + "/hub/api", SERVICE_TOKEN)
    with pytest.raises(NoProbeCredential) as err:
        await tokens.token("alice", "")
    await tokens.close()
    assert "scopes could not be read" in err.value.message and hub.posts == []
