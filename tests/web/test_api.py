"""The service's JSON API and form endpoints against a real hub (and the service in it as a
managed service) on the simulated cluster: alice and bob each hold one GPU.

Every endpoint and its errors: own sessions only (someone else's is 404), admin endpoints
403 for non-admins (hub admin flag or the custom scope open them), cookie writes refused
without the service's XSRF token, bad input 400 with a clear message and nothing changed,
user-controlled names escaped."""

from __future__ import annotations

import asyncio
import datetime as dt
import html

import pytest
import pytest_asyncio

from jupyterhub_gpu_reclaim.store import Store

from ..support.hubapi import HubAPI
from ..support.service_hub import until
from ..support.web_client import PREFIX, Client, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

UTC = dt.timezone.utc
EVIL = "<script>alert(\"x\")'&"  # no "/": hub user names cannot have one


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub):
    """alice and bob each run a 1-GPU server; clients as alice, bob, admin, carol, nobody."""
    clients: dict[str, Client] = {}
    async with HubAPI.of(hub) as api:
        try:
            for user in ("alice", "bob"):
                await api.start(user, "gpu-1")
            await asyncio.gather(*(api.wait_ready(u) for u in ("alice", "bob")))
            for user in ("alice", "bob", "admin", "carol"):
                clients[user] = Client(hub.info["url"], await user_token(api, user))
            clients["nobody"] = Client(hub.info["url"])

            async def both_seen():
                _, a = await clients["alice"].json("GET", "api/sessions")
                _, b = await clients["bob"].json("GET", "api/sessions")
                return a.get("sessions") and b.get("sessions") and a["sessions"][0]["gpus"] == 1
            await until(both_seen, 60, "the service sees alice's and bob's GPU sessions")
            yield api, clients
        finally:
            for c in clients.values():
                await c.close()


def intents(hub) -> dict:
    with Store.open(hub.info["store"]) as s:
        return s.intents()


async def test_sessions_are_the_callers_own_with_state(scene):
    _, c = scene
    status, body = await c["alice"].json("GET", "api/sessions")
    assert status == 200 and body["user"] == "alice"
    s, = body["sessions"]
    assert s["session"] == "alice/" and s["gpus"] == 1 and s["profile"] == "gpu-1"
    assert s["state"] in ("active", "idle", "warned") and s["state_text"]
    assert "util_now" in s and "spark" in s and "rule" in s and "evidence" in s
    assert body["max_keepalive_seconds"] == 4 * 3600
    status, body = await c["bob"].json("GET", "api/sessions")
    assert [s["session"] for s in body["sessions"]] == ["bob/"]


async def test_keep_alive_is_stored_shown_and_cleared(hub, scene):
    _, c = scene
    status, body = await c["alice"].json("PUT", "api/sessions/alice//intent", {"duration": "2h"})
    assert status == 200, body
    until_t = dt.datetime.fromisoformat(body["intent_until"])
    assert abs((until_t - dt.datetime.now(UTC)) - dt.timedelta(hours=2)) < dt.timedelta(minutes=1)
    assert abs(intents(hub)["alice/"].until - until_t) < dt.timedelta(seconds=1)
    _, body = await c["alice"].json("GET", "api/sessions")
    assert body["sessions"][0]["state"] == "kept" and "kept alive until" in body["sessions"][0]["state_text"]
    # an ISO time works too
    at = (dt.datetime.now(UTC) + dt.timedelta(hours=1)).replace(microsecond=0)
    status, body = await c["alice"].json("PUT", "api/sessions/alice//intent", {"until": at.isoformat()})
    assert status == 200 and intents(hub)["alice/"].until == at
    status, body = await c["alice"].json("DELETE", "api/sessions/alice//intent")
    assert status == 200 and body == {"session": "alice/", "cleared": True}
    assert "alice/" not in intents(hub)


@pytest.mark.parametrize("body, message", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b"{}", "exactly one of"),
    (b'{"duration": "2h", "hours": 1}', "exactly one of"),
    (b'{"duration": "soon"}', "not a valid duration"),
    (b'{"hours": true}', "not a valid duration"),
    (b'{"until": "2020-01-01T00:00:00Z"}', "in the past"),
    (b'{"until": "2030-01-01T10:00:00"}', "time zone"),
    (b'{"duration": "5h"}', "beyond the cap"),
])
async def test_bad_intent_is_refused_and_changes_nothing(hub, scene, body, message):
    _, c = scene
    before = intents(hub)
    status, answer = await c["alice"].json("PUT", "api/sessions/alice//intent", data=body,
                                           headers={"Content-Type": "application/json"})
    assert status == 400 and message in answer["message"], answer
    assert intents(hub) == before


async def test_someone_elses_session_is_404(hub, scene):
    _, c = scene
    for method, path in (("PUT", "api/sessions/bob//intent"), ("DELETE", "api/sessions/bob//intent"),
                         ("POST", "api/sessions/bob//stop"), ("PUT", "api/sessions/alice/nosuch/intent")):
        status, body = await c["alice"].json(method, path, {"duration": "1h"} if method == "PUT" else None)
        assert status == 404 and "of yours" in body["message"], (method, path, body)
    # the page too: selecting bob's session shows only alice's own
    status, page, _ = await c["alice"].call("GET", "?session=bob/")
    assert status == 200 and 'data-session="bob/"' not in page and 'data-session="alice/"' in page
    assert "bob/" not in intents(hub)


async def test_without_credentials_api_is_403_and_pages_go_to_the_hub_login(scene):
    _, c = scene
    status, body = await c["nobody"].json("GET", "api/sessions")
    assert status == 403 and "authentication required" in body["message"]
    status, body = await c["nobody"].json("POST", "api/admin/actions", {"action": "reclaim", "session": "bob/"})
    assert status == 403
    status, _, r = await c["nobody"].call("GET", "")
    assert status == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]
    assert "token" not in r.headers["Location"].split("?", 1)[0]


@pytest.mark.parametrize("method, path", [
    ("GET", "api/admin/candidates"), ("GET", "api/admin/candidates?format=csv"), ("GET", "api/admin/queue"),
    ("GET", "api/admin/history"), ("GET", "api/admin/usage"), ("POST", "api/admin/actions"), ("GET", "admin"),
])
async def test_admin_endpoints_are_403_for_non_admins(scene, method, path):
    _, c = scene
    body = {"action": "reclaim", "session": "bob/"} if method == "POST" else None
    status, answer = await c["alice"].json(method, path, body)
    assert status == 403, answer


async def test_admin_reads_candidates_queue_and_history(scene):
    _, c = scene
    status, body = await c["admin"].json("GET", "api/admin/candidates")
    assert status == 200
    by_sid = {s["session"]: s for s in body["candidates"]}
    assert set(by_sid) == {"alice/", "bob/"}
    s = by_sid["bob/"]
    for key in ("user", "server", "profile", "node", "gpus", "util_mean", "util_max", "mem_mib", "kernels",
                "hub_last_activity", "state", "rule", "evidence", "warned_at", "reclaim_at", "intent_until",
                "exempt_until"):
        assert key in s, key
    assert s["node"] and s["node"].startswith("gpu-")
    assert body["totals"]["gpus_held"] == 2
    status, text, r = await c["admin"].call("GET", "api/admin/candidates?format=csv")
    assert status == 200 and r.headers["Content-Type"].startswith("text/csv")
    lines = text.strip().splitlines()
    assert lines[0].startswith("user,server,profile,node,gpus") and len(lines) == 3
    status, body = await c["admin"].json("GET", "api/admin/candidates?format=xml")
    assert status == 400 and "format" in body["message"]
    status, body = await c["admin"].json("GET", "api/admin/queue")
    assert status == 200 and body["queue"] == []
    status, body = await c["admin"].json("GET", "api/admin/history?since=1h")
    assert status == 200 and {"reclaims", "stuck", "audit"} <= set(body)
    status, body = await c["admin"].json("GET", "api/admin/history?since=yesterday-ish")
    assert status == 400 and "since" in body["message"]
    status, body = await c["admin"].json("GET", "api/admin/usage?days=2")
    assert status == 200 and [set(d) for d in body["days"]] == [{"start", "end", "held", "idle", "freed", "waiting"}] * 2

    async def held_today() -> bool:  # the scene's GPU sessions run today; the figure is in
        _, body = await c["admin"].json("GET", "api/admin/usage?days=1")  # 0.01 GPU-hours
        return body["days"][-1]["held"] > 0
    await until(held_today, 60, "the scene's GPU-hours held today on the admin API")
    for days in ("0", "32", "7d", "-1"):
        status, body = await c["admin"].json("GET", f"api/admin/usage?days={days}")
        assert status == 400 and "days: a whole number from 1 to 31" in body["message"], days


async def test_the_custom_scope_opens_the_admin_api(scene):
    _, c = scene  # carol is no hub admin; her role has custom:gpu-reclaim:admin
    status, body = await c["carol"].json("GET", "api/admin/queue")
    assert status == 200, body


@pytest.mark.parametrize("body, status, message", [
    ({"action": "explode", "session": "bob/"}, 400, "action must be one of"),
    ({"action": "exempt", "session": "bob/", "hours": "many"}, 400, "hours must be a number"),
    ({"action": "exempt", "session": "bob/", "hours": -1}, 400, "hours must be in"),
    ({"action": "exempt", "session": "bob", "hours": 1}, 400, "USER/SERVER"),
    ({"action": "exempt", "session": "nobody/", "hours": 1}, 404, "no running session"),
    ({"action": "reclaim", "session": "nobody/"}, 404, "no running session"),
    ({"action": "retry-stop", "session": "bob/"}, 404, "no stuck stop"),
])
async def test_bad_admin_actions_are_refused(hub, scene, body, status, message):
    _, c = scene
    got, answer = await c["admin"].json("POST", "api/admin/actions", body)
    assert got == status and message in answer["message"], answer
    with Store.open(hub.info["store"]) as s:
        assert s.exemptions(dt.datetime.now(UTC)) == {} and not s.audit_log(session=body["session"])


async def test_admin_exempts_and_clears_intent_with_audit(hub, scene):
    _, c = scene
    status, body = await c["admin"].json("POST", "api/admin/actions",
                                         {"action": "exempt", "session": "bob/", "hours": 2})
    assert status == 200 and "exempt until" in body["message"]
    _, body = await c["bob"].json("GET", "api/sessions")
    assert body["sessions"][0]["state"] == "exempt"
    await c["bob"].json("PUT", "api/sessions/bob//intent", {"hours": 1})
    status, body = await c["admin"].json("POST", "api/admin/actions", {"action": "clear-intent", "session": "bob/"})
    assert status == 200 and "cleared" in body["message"]
    assert "bob/" not in intents(hub)
    with Store.open(hub.info["store"]) as s:
        log = s.audit_log(session="bob/")
        assert [(a.actor, a.action) for a in log] == [("admin", "exempt"), ("bob", "keepalive"),
                                                            ("admin", "clear-intent")]
        assert "bob/" in s.exemptions(dt.datetime.now(UTC))
    # the cycle applies it: bob's decision becomes keep/exempt
    async def exempt_rule():
        _, b = await c["admin"].json("GET", "api/admin/candidates")
        return any(s["session"] == "bob/" and s["rule"] == "exempt" for s in b["candidates"])
    await until(exempt_rule, 20, "the cycle applies the exemption")


async def test_cookie_writes_need_the_services_xsrf_token(hub, scene):
    api, _ = scene
    browser = Client(hub.info["url"])
    try:
        await browser.log_in("alice")
        status, body = await browser.json("GET", "api/sessions")  # a read with the cookie
        assert status == 200 and body["user"] == "alice"
        # writes without the XSRF token: refused, nothing changed
        status, body = await browser.json("PUT", "api/sessions/alice//intent", {"duration": "1h"})
        assert status == 403, body
        status, page, _ = await browser.call("POST", "sessions/keepalive",
                                             data={"session": "alice/", "duration": "1h"})
        assert status == 403
        assert "alice/" not in intents(hub)
        xsrf = await browser.xsrf()
        status, body = await browser.json("PUT", "api/sessions/alice//intent", {"duration": "1h"},
                                          headers={"X-XSRFToken": xsrf})
        assert status == 200, body
        status, _, r = await browser.call("POST", "sessions/keepalive",
                                          data={"session": "alice/", "duration": "2h", "_xsrf": xsrf})
        assert status == 303 and r.headers["Location"].startswith(PREFIX)
        assert intents(hub)["alice/"].until > dt.datetime.now(UTC) + dt.timedelta(minutes=110)
        # the form's errors are shown on the page, 400, nothing changed
        before = intents(hub)
        status, page, _ = await browser.call("POST", "sessions/keepalive",
                                             data={"session": "alice/", "until_time": "25:99", "_xsrf": xsrf})
        assert status == 400 and "not a time HH:MM" in page and intents(hub) == before
        status, page, _ = await browser.call("POST", "sessions/keepalive",
                                             data={"session": "bob/", "duration": "1h", "_xsrf": xsrf})
        assert status == 404 and "of yours" in page and "bob/" not in intents(hub)
        # a token-authenticated write needs no XSRF token (tested above with the token clients)
    finally:
        await browser.close()


async def test_keepalive_link_lands_on_the_user_page_with_the_session_selected(scene):
    _, c = scene
    status, _, r = await c["alice"].call("GET", "keepalive?session=alice/")
    assert status == 302 and r.headers["Location"] == f"{PREFIX}?session=alice%2F#s-alice%2F"
    status, page, _ = await c["alice"].call("GET", "?session=alice/")
    assert status == 200 and 'class="session state-' in page and " selected\"" in page
    assert "Keep alive until" in page and "At most 4 h from now" in page
    assert "Stop now and free the GPU" in page and "<svg class=\"spark\"" in page


async def test_user_controlled_names_are_escaped(hub, scene):
    api, c = scene
    token = await user_token(api, EVIL)
    now = dt.datetime.now(UTC)
    with Store.open(hub.info["store"]) as s:
        rid = s.begin_reclaim(f"{EVIL}/{EVIL}", "gpu-idle", now, {}, 1, episode="evil")
        s.finish_reclaim(rid, now, "stopped")
        s.audit(EVIL, "keepalive", f"{EVIL}/{EVIL}", t=now)
    evil = Client(hub.info["url"], token)
    try:
        status, page, _ = await evil.call("GET", "")
        assert status == 200
        assert EVIL not in page and "<script>alert" not in page
        assert html.escape(EVIL, quote=True) in page or "&lt;script&gt;" in page
    finally:
        await evil.close()
    status, page, _ = await c["admin"].call("GET", "admin")
    assert status == 200 and "<script>alert" not in page and "&lt;script&gt;alert(&#34;x&#34;)&#39;&amp;" in page
    status, text, r = await c["admin"].call("GET", "api/admin/history")
    assert r.headers["Content-Type"] == "application/json" and r.headers["X-Content-Type-Options"] == "nosniff"


async def test_stop_now_and_admin_reclaim_go_through_the_hub(hub, scene):
    api, c = scene
    status, body = await c["alice"].json("POST", "api/sessions/alice//stop")
    assert status == 202 and body == {"session": "alice/", "stopping": True}
    status, body = await c["admin"].json("POST", "api/admin/actions", {"action": "reclaim", "session": "bob/"})
    assert status == 200 and "reclaiming" in body["message"]

    async def gone():
        return await api.server("alice") is None and await api.server("bob") is None
    await until(gone, 60, "alice's and bob's servers stopped")
    with Store.open(hub.info["store"]) as s:
        r, = [r for r in s.reclaims() if r.session == "bob/"]
        assert r.rule == "admin" and r.evidence == {"by": "admin"}
        assert not [r for r in s.reclaims() if r.session == "alice/"]  # her own stop is no reclaim
        assert ("alice", "stop") in [(a.actor, a.action) for a in s.audit_log(session="alice/")]
    # the resume-priority endpoint sees the admin's reclaim
    status, body = await c["bob"].json("GET", "api/reclaims?user=bob")
    assert status == 200 and body["reclaims"][0]["rule"] == "admin"
    # the spawner's expected-wait endpoint: one's own queue (empty: nobody waits), nobody else's
    status, body = await c["bob"].json("GET", "api/queue?user=bob")
    assert status == 200 and body["queue"] == []
    assert body["max_keepalive_seconds"] == 4 * 3600  # the spawn form's cap: the service's --max-keepalive
    for path in ("api/queue?user=alice", "api/reclaims?user=alice"):
        status, body = await c["bob"].json("GET", path)
        assert status == 403 and "only their own" in body["message"], path
    status, body = await c["bob"].json("GET", "api/queue")
    assert status == 400 and "user=NAME is required" in body["message"]
