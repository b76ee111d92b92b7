"""No credential worth more than the probed user's own server reaches a user's server.

A real JupyterHub runs jupyterhub-gpu-reclaim as a managed service with the documented
role. mallory (1 GPU, never used) adds to her ~/.jupyter/jupyter_server_config.py a hook
that records the Authorization header and the cookies of every request her server gets,
restarts her server, and keeps a cell running. The service probes her kernels (her GPU is
idle) and keeps her session for the busy kernel. Every credential her server recorded is
then tried against bob's server, the hub's user list and a stop of bob's server: all
refused. A second reclaim service whose role lacks `tokens` cannot mint a probe token:
it sends nothing and holds mallory's session, saying why.

The probe-token cache (reuse, renewal, a token the user revoked, deletion) is checked on
the same hub, against bob's server. The hub has no cap on API tokens (JupyterHub's default):
whoever holds the service's token gets from the probe-token API a token of at most 1 h, for a
running server only, and what it minted is deleted when the service restarts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from gpu_reclaim_sim.launch import Child
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
from jupyterhub_gpu_reclaim.signals.probe_token_client import (
    PROBE_NOTE,
    PROBE_TOKEN_MAX_LIFETIME,
    NoProbeCredential,
    ProbeTokens,
    identify_scopes,
    probe_scope,
)
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.hubapi import HubAPI
from ..support.probe_tokens_live import (HOSTILE_CONFIG, captured, listed_probe_tokens, none_left, post_probe_token,
                                         probe_tokens, some_left, token_gone)
from ..support.service_hub import QUICK, latest_rule, start_service_hub, until, write_service_config
from ..support.store_reads import decisions_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
SERVICE_TOKEN = secrets.token_hex(16)  # the reclaim service's own token (the documented role)
NOTOKENS_TOKEN = secrets.token_hex(16)  # the second service's (the role without `tokens`)
GROUP_MINTER_TOKEN = secrets.token_hex(16)  # a service with `tokens!group=gpu-users` (bob)
GROUP_PROBER_TOKEN = secrets.token_hex(16)  # one with `custom:gpu-reclaim:probe-tokens!group=gpu-users`
PROBE_PATHS = ("/user/mallory/api/kernels?", "/user/mallory/api/terminals?")


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    """The hub with the reclaim service, and the second reclaim service (no `tokens`) run
    beside it as an external service of the hub."""
    workdir = tmp_path_factory.mktemp("hub")
    # no CPU culling here: bob's server must stay up to be attacked
    child = start_service_hub(workdir, sim, hub_config=HERE / "jupyterhub_config_probe.py", timeout=3600,
                              env={"GPU_RECLAIM_SERVICE_TOKEN": SERVICE_TOKEN,
                                   "GPU_RECLAIM_NOTOKENS_TOKEN": NOTOKENS_TOKEN,
                                   "GPU_RECLAIM_GROUP_MINTER_TOKEN": GROUP_MINTER_TOKEN,
                                   "GPU_RECLAIM_GROUP_PROBER_TOKEN": GROUP_PROBER_TOKEN})
    # its hold comes when a reclaim would be due: QUICK timings
    config, store = write_service_config(workdir / "notokens", sim, **{**QUICK, "timeout": 3600})
    log_path = workdir / "notokens" / "service.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub_gpu_reclaim", f"--config={config}",
                                 f"--url={child.info['url']}/hub/api"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir / "notokens",
                                env={**os.environ, "JUPYTERHUB_API_TOKEN": NOTOKENS_TOKEN})
    notokens = Child("gpu-reclaim-notokens", proc, log_path)
    child.info.update(notokens_store=store, notokens=notokens)
    yield child
    notokens.stop()
    child.stop(grace=60)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub):
    """bob (no GPU) and mallory (1 GPU, the recording hook, a cell running) are up and the
    service has probed mallory's kernels; yields the tests' client."""
    cell = None
    async with HubAPI.of(hub) as api:
        try:
            await api.start("bob", "cpu")
            await api.start("mallory", "gpu-1")
            await asyncio.gather(api.wait_ready("bob"), api.wait_ready("mallory"))
            # as mallory would, from a notebook: the hook in her config, then a restart
            await api.run_code("mallory", "import pathlib; d = pathlib.Path.home() / '.jupyter'; "
                                          "d.mkdir(exist_ok=True); "
                                          f"(d / 'jupyter_server_config.py').write_text({HOSTILE_CONFIG!r})")
            await api.stop("mallory")
            await api.start("mallory", "gpu-1")
            await api.wait_ready("mallory")
            # the GPU used a little, then a cell runs on (a busy kernel after GPU use is kept)
            cell = asyncio.create_task(api.run_code(
                "mallory", "from gpu_reclaim_sim.gpu import use_gpu; use_gpu(percent=60, seconds=15); "
                           "import time; time.sleep(900)", timeout=1000))

            async def probed() -> bool:
                records = await captured(api)
                return (latest_rule(hub, "mallory/") == ("keep", "kernel-busy")
                        and sum(r["uri"].startswith(PROBE_PATHS) for r in records) >= 4)

            await until(probed, 90, "the service probed mallory's busy kernel")
            yield api
        finally:
            if cell is not None:
                cell.cancel()
                await asyncio.gather(cell, return_exceptions=True)


@pytest.mark.hub_contract
async def test_probes_carry_only_a_token_for_the_probed_server(hub, scene):
    api = scene
    records = await captured(api)
    assert records, "the hook recorded nothing"
    for r in records:  # the service's tokens never arrive, in any header or URL
        for token in (SERVICE_TOKEN, NOTOKENS_TOKEN):
            assert token not in json.dumps(r)
    probes = [r for r in records if r["uri"].startswith(PROBE_PATHS)]
    assert probes and all("no_track_activity=1" in r["uri"] and r["status"] == 200 for r in probes)
    assert all(r["cookie"] is None for r in probes)
    # every credential not the tests' own came with a probe (nothing else sends one)
    tokens = probe_tokens(records, hub.info["token"])
    assert tokens == probe_tokens(probes, hub.info["token"]) and tokens
    # what they are: mallory's own, for her server only, expiring, noted as probe tokens
    allowed = {probe_scope("mallory", "")} | identify_scopes("mallory")
    valid = 0
    async with aiohttp.ClientSession() as anonymous:
        for token in tokens:
            async with anonymous.get(f"{api.api}/user", headers={"Authorization": f"token {token}"}) as r:
                if r.status == 403:  # replaced since (renewed, or revoked and re-minted)
                    continue
                assert r.status == 200
                me = await r.json()
            valid += 1
            assert (me["kind"], me["name"], set(me["scopes"])) == ("user", "mallory", allowed)
    assert valid >= 1
    listed = (await api.request("GET", "/users/mallory/tokens"))["api_tokens"]
    mine = [t for t in listed if t["note"] == PROBE_NOTE]
    assert len(mine) == 1 and set(mine[0]["scopes"]) == allowed
    lifetime = parse_time(mine[0]["expires_at"]) - parse_time(mine[0]["created"])
    assert dt.timedelta(minutes=59) < lifetime <= dt.timedelta(hours=1)


async def test_recorded_credentials_are_refused_elsewhere(hub, scene):
    api = scene
    tokens = probe_tokens(await captured(api), hub.info["token"])
    attacks = [("GET", f"{api.url}/user/bob/api/contents"), ("GET", f"{api.api}/users"),
               ("DELETE", f"{api.api}/users/bob/server")]
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as attacker:
        async def attempt(method: str, url: str, token: str) -> int:
            async with attacker.request(method, url, headers={"Authorization": f"token {token}"},
                                        allow_redirects=False) as r:
                return r.status

        for token in tokens:
            assert [await attempt(m, u, token) for m, u in attacks] == [403, 403, 403]
        # where a probe token is meant to work, it does
        assert 200 in [await attempt("GET", f"{api.url}/user/mallory/api/status", t) for t in tokens]
        # the service's own token, had it been sent, would have listed everyone
        assert await attempt("GET", f"{api.api}/users", SERVICE_TOKEN) == 200
    assert (await api.server("bob"))["ready"]


async def test_a_role_without_tokens_sends_nothing_and_holds(hub, scene):
    """The second service cannot mint (HTTP 403): it never probes, never falls back to its
    own token, and holds mallory's session once a reclaim would be due, saying why."""
    api = scene

    def held() -> dict | None:
        with Store.open(hub.info["notokens_store"]) as store:
            for _, d in decisions_of(store, "mallory/"):
                if (d.action, d.rule) == ("hold", "kernel-data-missing"):
                    return d.evidence
        return None

    limit = QUICK["idle_reclaim_after"] + QUICK["warning_lead"] + 60
    evidence = await until(held, limit, "the second service holds mallory's session")
    assert "HTTP 403" in evidence["problem"] and "`tokens`" in evidence["problem"]
    records = await captured(api)
    assert not any(NOTOKENS_TOKEN in json.dumps(r) for r in records)
    # every probe request carries one of the first service's tokens: none came bare
    assert all(r["authorization"] for r in records if r["uri"].startswith(PROBE_PATHS))
    # the cause is logged once, not every cycle
    notokens = hub.info["notokens"]
    assert notokens.alive()
    attempts = hub.log_path.read_text().count("403 POST /hub/api/users/mallory/tokens (gpu-reclaim-notokens@")
    assert attempts > 3  # it asks each cycle (the role may be fixed) ...
    log = notokens.log_path.read_text()
    assert log.count("the hub refused a kernel-probe token for 'mallory': HTTP 403") == 1  # ... says it once
    # the first service still keeps her for the busy kernel
    assert latest_rule(hub, "mallory/") == ("keep", "kernel-busy")


async def test_probe_token_cache_on_the_real_hub(hub, scene):
    """Reuse, renewal when a quarter of the lifetime is left, a token the user revoked,
    deletion when the session goes and at shutdown; the hub's own token-lifetime cap."""
    api = scene
    now = [0.0]
    tokens = ProbeTokens(api.api, SERVICE_TOKEN, lifetime=3600, clock=lambda: now[0])
    async with KernelSignal(tokens) as ks:
        assert await ks.probe("bob", "", "/user/bob/", api.url) == ([], [])
        first = await tokens.token("bob", "")
        assert await tokens.token("bob", "") == first  # reused: one token at the hub
        (listed,) = await listed_probe_tokens(api, "bob")
        assert listed["scopes"] and set(listed["scopes"]) == {probe_scope("bob", "")} | identify_scopes("bob")

        now[0] += 0.75 * 3600  # a quarter left: replaced, the old one deleted
        second = await tokens.token("bob", "")
        assert second != first
        await until(lambda: token_gone(api, "bob", listed["id"]), 30, "the old token deleted")

        # bob revokes the (not yet used) token: his server refuses it, a new one is minted
        (current,) = await listed_probe_tokens(api, "bob")
        await api.request("DELETE", f"/users/bob/tokens/{current['id']}")
        assert await ks.probe("bob", "", "/user/bob/", api.url) == ([], [])
        assert await tokens.token("bob", "") not in (first, second)

        ks.release("bob/")  # the session left the ready list
        await until(lambda: none_left(api, "bob"), 30, "bob's probe token deleted")
        await tokens.token("bob", "")
        assert len(await listed_probe_tokens(api, "bob")) == 1
    assert await listed_probe_tokens(api, "bob") == []  # closed: deleted

    # the probe-token API mints for at most 1 h: the lifetime follows its answer
    capped = ProbeTokens(api.api, SERVICE_TOKEN, lifetime=3 * 3600)
    await capped.token("bob", "")
    assert capped.lifetime == PROBE_TOKEN_MAX_LIFETIME == 3600
    (listed,) = await listed_probe_tokens(api, "bob")
    lifetime = parse_time(listed["expires_at"]) - parse_time(listed["created"])
    assert dt.timedelta(seconds=3590) < lifetime <= dt.timedelta(seconds=3600)
    await capped.close()
    assert await listed_probe_tokens(api, "bob") == []


@pytest.mark.jupyterhub(6, reason="JupyterHub 5 checks a service's group filter on `tokens` "
                                   "against the service itself, so it mints for no one")
async def test_a_group_filter_on_tokens_limits_whose_servers_are_probed(hub, scene):
    """`tokens!group=gpu-users` mints for the group's members (bob) only; others are not
    probed (their sessions are held like those of a role without `tokens`)."""
    api = scene
    tokens = ProbeTokens(api.api, GROUP_MINTER_TOKEN)
    try:
        async with KernelSignal(tokens) as ks:
            assert await ks.probe("bob", "", "/user/bob/", api.url) == ([], [])
            with pytest.raises(NoProbeCredential) as err:
                await ks.probe("mallory", "", "/user/mallory/", api.url)
        assert "HTTP 403" in err.value.message
    finally:
        await tokens.close()
    assert await listed_probe_tokens(api, "bob") == []


@pytest.mark.hub_contract
@pytest.mark.jupyterhub(5, reason="JupyterHub 6 mints for the group's members (the test above)")
async def test_on_jupyterhub5_a_group_filter_on_tokens_mints_for_no_one(hub, scene):
    """What docs/security.md says of JupyterHub 5: its token handler applies the filter of
    `tokens!group=gpu-users` to the requesting service rather than to the user (fixed in 6),
    so even bob, in the group, gets no probe token; every session is held as without `tokens`."""
    api = scene
    tokens = ProbeTokens(api.api, GROUP_MINTER_TOKEN)
    try:
        async with KernelSignal(tokens) as ks:
            for user in ("bob", "mallory"):
                with pytest.raises(NoProbeCredential) as err:
                    await ks.probe(user, "", f"/user/{user}/", api.url)
                assert "HTTP 403" in err.value.message
    finally:
        await tokens.close()
    assert await listed_probe_tokens(api, "bob") == []


@pytest.mark.hub_contract
async def test_the_services_token_cannot_mint_an_admins_token(hub, scene):
    """Issue 27, finding 2, attacked as found: whoever reads the service's environment posts
    `/hub/api/users/admin/tokens` with no scopes, hoping for the admin's 45 scopes and then
    making bob an admin. The role holds no `tokens`: refused. The probe-token API it holds
    instead mints only a probe scope of one of the user's own servers, with a lifetime, and
    deletes only probe tokens."""
    api = scene
    async with aiohttp.ClientSession(headers={"Authorization": f"token {SERVICE_TOKEN}"}) as stolen:
        async def post(path: str, body: dict) -> tuple[int, dict]:
            async with stolen.post(f"{api.api}{path}", json=body) as r:
                return r.status, await r.json()

        async with stolen.get(f"{api.api}/user") as r:
            me = await r.json()
        assert "tokens" not in me["scopes"] and "custom:gpu-reclaim:probe-tokens" in me["scopes"]
        assert (await post("/users/admin/tokens", {}))[0] == 403
        assert (await post("/users/admin/tokens", {"scopes": ["admin:users"]}))[0] == 403
        refused = [{}, {"scopes": ["admin:users"], "expires_in": 300}, {"scopes": ["inherit"], "expires_in": 300},
                   {"scopes": [probe_scope("admin", "")], "expires_in": 300},  # admin's server is not running
                   {"scopes": [probe_scope("mallory", "")], "expires_in": 300},  # not admin's server
                   {"scopes": [probe_scope("admin", ""), "admin:users"], "expires_in": 300}]
        for body in refused:
            status, answer = await post("/gpu-reclaim/users/admin/tokens", body)
            assert status == 400, (body, answer)
        for body in ({"scopes": [probe_scope("mallory", ""), "read:users"], "expires_in": 300},
                     {"scopes": [probe_scope("mallory", "")]}, {"scopes": [probe_scope("mallory", "")], "expires_in": 0},
                     {"scopes": [{"a": 1}], "expires_in": 300}, {"scopes": "access:servers", "expires_in": 300},
                     {"scopes": [probe_scope("mallory", "")], "expires_in": True}):
            assert (await post("/gpu-reclaim/users/mallory/tokens", body))[0] == 400, body
        # what it does mint: mallory's probe token, nothing more
        status, minted = await post("/gpu-reclaim/users/mallory/tokens",
                                    {"scopes": [probe_scope("mallory", "")], "expires_in": 300, "note": "mine"})
        assert status == 201 and minted["note"] == PROBE_NOTE
        assert set(minted["scopes"]) == {probe_scope("mallory", "")} | identify_scopes("mallory")
        async with aiohttp.ClientSession(headers={"Authorization": f"token {minted['token']}"}) as probe:
            async with probe.patch(f"{api.api}/users/bob", json={"admin": True}) as r:
                assert r.status == 403
        # it deletes that token, and no other token of the user
        users_own = await api.request("POST", "/users/mallory/tokens", {"note": "mallory's own", "expires_in": 300})
        for token_id in (users_own["id"], "a²", "a" + "9" * 30, "b1", "a"):
            async with stolen.delete(f"{api.api}/gpu-reclaim/users/mallory/tokens/{token_id}") as r:
                assert r.status == 404, token_id
        async with stolen.delete(f"{api.api}/gpu-reclaim/users/mallory/tokens/{minted['id']}") as r:
            assert r.status == 204
    left = {t["id"] for t in (await api.request("GET", "/users/mallory/tokens"))["api_tokens"]}
    assert users_own["id"] in left and minted["id"] not in left
    await api.request("DELETE", f"/users/mallory/tokens/{users_own['id']}")
    assert not (await api.request("GET", "/users/bob"))["admin"]


@pytest.mark.hub_contract
async def test_a_group_filter_on_the_probe_token_scope_limits_whose_servers_are_probed(hub, scene):
    """`custom:gpu-reclaim:probe-tokens!group=gpu-users` mints for the group's members (bob)
    only, on JupyterHub 5 as on 6 (the probe-token API checks the filter on the probed user)."""
    api = scene
    tokens = ProbeTokens(api.api, GROUP_PROBER_TOKEN)
    try:
        async with KernelSignal(tokens) as ks:
            assert await ks.probe("bob", "", "/user/bob/", api.url) == ([], [])
            with pytest.raises(NoProbeCredential) as err:
                await ks.probe("mallory", "", "/user/mallory/", api.url)
        assert "HTTP 404" in err.value.message and "must cover this user" in err.value.message
    finally:
        await tokens.close()
    assert await listed_probe_tokens(api, "bob") == []


@pytest.mark.hub_contract
async def test_a_probe_token_lives_at_most_an_hour_whoever_asks(hub, scene):
    """Issue 35, finding 1, attacked as found: with the service's token, a mint for mallory's
    running server with a lifetime of years (the hub itself has no cap) is refused, saying the
    bound; nothing is minted. What is minted, the hub's log says with its lifetime and expiry
    (and never the token)."""
    api = scene
    before = {t["id"] for t in await listed_probe_tokens(api, "mallory")}
    scope = probe_scope("mallory", "")
    for expires_in in (PROBE_TOKEN_MAX_LIFETIME + 1, 7200, 365 * 86400, 200_000_000_000):
        status, answer = await post_probe_token(api, SERVICE_TOKEN, "mallory", {"scopes": [scope], "expires_in": expires_in})
        assert status == 400, answer
        assert answer["message"].startswith(f"token expires_in: {expires_in} must not exceed {PROBE_TOKEN_MAX_LIFETIME} "
                                            f"(kernel-probe tokens live at most {PROBE_TOKEN_MAX_LIFETIME} s")
    assert {t["id"] for t in await listed_probe_tokens(api, "mallory")} == before

    status, minted = await post_probe_token(api, SERVICE_TOKEN, "mallory", {"scopes": [scope], "expires_in": PROBE_TOKEN_MAX_LIFETIME})
    assert status == 201
    lifetime = parse_time(minted["expires_at"]) - parse_time(minted["created"])
    assert dt.timedelta(seconds=PROBE_TOKEN_MAX_LIFETIME - 10) < lifetime <= dt.timedelta(seconds=PROBE_TOKEN_MAX_LIFETIME)
    await api.request("DELETE", f"/users/mallory/tokens/{minted['id']}")
    log = hub.log_path.read_text()
    assert (f"Service gpu-reclaim minted kernel-probe token {minted['id']} for {scope}, expiring in "
            f"{PROBE_TOKEN_MAX_LIFETIME} s (at {minted['expires_at']})") in log
    assert minted["token"] not in log


@pytest.mark.hub_contract
async def test_a_lifetime_past_the_year_9999_is_a_400_not_a_500(hub, scene):
    """Issue 35, finding 3: an expires_in whose expiry no datetime holds (≥ ~2.6·10¹¹ s) made
    the hub answer 500 with an OverflowError traceback in its log."""
    api = scene
    log_before = len(hub.log_path.read_text())
    for expires_in in (300_000_000_000, 2**63, 10**30):
        status, answer = await post_probe_token(api, SERVICE_TOKEN, "mallory", {"scopes": [probe_scope("mallory", "")],
                                                            "expires_in": expires_in})
        assert status == 400 and "must not exceed" in answer["message"], answer
    assert "Traceback" not in hub.log_path.read_text()[log_before:]


@pytest.mark.hub_contract
async def test_no_probe_token_for_a_server_still_spawning(hub, scene):
    """Issue 35, finding 3: slowpoke's server is pending spawn (the hub's pre-spawn hook holds
    it 15 s), so it has a server record but is not running: the API says so (400) and mints
    nothing; once the server is ready, the same request mints."""
    api = scene
    body = {"scopes": [probe_scope("slowpoke", "")], "expires_in": 300}
    await api.start("slowpoke", "cpu")
    try:
        assert (await api.server("slowpoke"))["pending"] == "spawn"
        status, answer = await post_probe_token(api, SERVICE_TOKEN, "slowpoke", body)
        assert (await api.server("slowpoke"))["pending"] == "spawn"  # still, so refused while spawning
        assert status == 400 and "slowpoke/ is pending spawn" in answer["message"], answer
        assert "running server only" in answer["message"]
        assert await listed_probe_tokens(api, "slowpoke") == []
        await api.wait_ready("slowpoke")
        status, minted = await post_probe_token(api, SERVICE_TOKEN, "slowpoke", body)
        assert status == 201, minted
        await api.request("DELETE", f"/users/slowpoke/tokens/{minted['id']}")
    finally:
        await api.wait_ready("slowpoke")
        await api.stop("slowpoke")


@pytest.mark.hub_contract
async def test_the_probe_token_list_shows_only_probe_tokens_the_scope_covers(hub, scene):
    """`GET /hub/api/gpu-reclaim/tokens`: the probe tokens (models, never the tokens) of the
    users the scope covers, none of a user's own tokens; refused without the scope."""
    api = scene
    status, minted = await post_probe_token(api, SERVICE_TOKEN, "mallory", {"scopes": [probe_scope("mallory", "")], "expires_in": 300})
    assert status == 201
    users_own = await api.request("POST", "/users/mallory/tokens", {"note": "mallory's own", "expires_in": 300})
    # a token of the user's own (all mallory's rights) that merely carries the probe tokens' note
    look_alike = await api.request("POST", "/users/mallory/tokens", {"note": PROBE_NOTE, "expires_in": 300})

    async def listing(token: str) -> tuple[int, dict]:
        async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"}) as client:
            async with client.get(f"{api.api}/gpu-reclaim/tokens") as r:
                return r.status, await r.json()

    try:
        status, answer = await listing(SERVICE_TOKEN)
        assert status == 200
        ids = {(t["user"], t["id"]) for t in answer["api_tokens"]}
        assert ("mallory", minted["id"]) in ids and ("mallory", users_own["id"]) not in ids
        assert ("mallory", look_alike["id"]) not in ids  # nor deletable by the probe-token API
        async with aiohttp.ClientSession(headers={"Authorization": f"token {SERVICE_TOKEN}"}) as client:
            async with client.delete(f"{api.api}/gpu-reclaim/users/mallory/tokens/{look_alike['id']}") as r:
                assert r.status == 404
        assert look_alike["id"] in {t["id"] for t in (await api.request("GET", "/users/mallory/tokens"))["api_tokens"]}
        assert all(t["note"] == PROBE_NOTE and "token" not in t for t in answer["api_tokens"])
        assert minted["token"] not in json.dumps(answer)
        status, answer = await listing(GROUP_PROBER_TOKEN)  # the scope for gpu-users (bob) only
        assert status == 200 and {t["user"] for t in answer["api_tokens"]} <= {"bob"}
        assert (await listing(NOTOKENS_TOKEN))[0] == 403
        assert (await listing(minted["token"]))[0] == 403
    finally:
        for token_id in (minted["id"], users_own["id"], look_alike["id"]):
            await api.request("DELETE", f"/users/mallory/tokens/{token_id}")


@pytest.mark.hub_contract
async def test_probe_tokens_are_deleted_when_the_service_restarts(hub, scene):
    """Issue 35, finding 1: someone with the service's token minted probe tokens of their own
    (to the hub, as the service's own tokens that a killed service leaves), then the service is
    killed (no shutdown: its own tokens, if it holds any now, stay). The hub restarts it; it
    lists every probe token at the probe-token API and deletes them before minting its own."""
    api = scene
    minted = []
    for user in ("bob", "mallory"):
        status, answer = await post_probe_token(api, SERVICE_TOKEN, user, {"scopes": [probe_scope(user, "")], "expires_in": 3600})
        assert status == 201, answer
        minted.append(answer)

    async def listed() -> set[tuple[str, str]]:  # (id, created): SQLite gives a deleted token's id again
        return {(t["id"], t["created"]) for user in ("bob", "mallory") for t in await listed_probe_tokens(api, user)}

    # with the service's own: perhaps none now (the cache test deleted them; mallory's server
    # accepts a deleted token from its 5-minute cache, so the service was not refused yet)
    left = await listed()
    assert {(m["id"], m["created"]) for m in minted} <= left
    pid = (await api.request("GET", "/services/gpu-reclaim"))["pid"]
    assert pid
    os.kill(pid, signal.SIGKILL)

    async def deleted() -> bool:
        return not await listed() & left

    await until(deleted, 120, "the restarted service deleted the probe tokens minted before")
    async with aiohttp.ClientSession() as anonymous:
        for m in minted:
            async with anonymous.get(f"{api.api}/user", headers={"Authorization": f"token {m['token']}"}) as r:
                assert r.status == 403
    assert (await api.request("GET", "/services/gpu-reclaim"))["pid"] not in (0, pid)  # restarted
    assert "kernel-probe token(s) left by an earlier run" in hub.log_path.read_text()
    # and it probes mallory again with a token of its own
    await until(lambda: some_left(api, "mallory"), 60, "a new probe token for mallory")
