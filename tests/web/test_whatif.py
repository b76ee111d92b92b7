"""The what-if from the admin page and `api/admin/whatif`, against a real hub with the
service in it: an hour of history recorded into the service's store (a sample every 5 s,
as the web tests' fast timings need), replayed under the live policy (idle 15 min, 1 %)
and under an override; bad input refused with a clear message, nothing changed."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import os
import re
import signal
from pathlib import Path

import pytest
import pytest_asyncio

from jupyterhub_gpu_reclaim.store import Store

from ..support.records import record, slow_loader, used_then_idle
from ..support.hubapi import HubAPI
from ..support.web_client import Client, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

UTC = dt.timezone.utc
OVERRIDE = "idle_reclaim_after: 20m\ngpu_idle_threshold: 9"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub):
    """From 2 h to 1 h ago: dave used his GPU 30 min, then left it idle; erin's loader held
    it at 5 %. Clients: admin (a token, and a browser logged in), alice (no admin)."""
    start = dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(hours=2)
    with Store.open(hub.info["store"]) as s:
        record(s, start, 1, {"dave/": used_then_idle, "erin/": slow_loader}, stop=True,
               step=dt.timedelta(seconds=5))
    api = HubAPI.of(hub)
    clients = {user: Client(hub.info["url"], await user_token(api, user)) for user in ("admin", "alice")}
    clients["browser"] = Client(hub.info["url"])
    try:
        await clients["browser"].log_in("admin")
        yield clients
    finally:
        for c in clients.values():
            await c.close()
        await api.close()


def unchanged(hub):
    """What an admin's change would touch: the audit log, intents, exemptions."""
    with Store.open(hub.info["store"]) as s:
        return s.audit_log(), s.intents(), s.exemptions(dt.datetime.now(UTC))


def cell(page: str, row: str) -> tuple[str, str]:
    m = re.search(rf'<tr data-row="{row}">.*?<td class="live">([^<]*)</td><td class="override">([^<]*)</td>', page)
    assert m, row
    return m.group(1), m.group(2)


async def test_the_admin_page_replays_an_override(hub, scene):
    browser = scene["browser"]
    before = unchanged(hub)
    status, page, _ = await browser.call("GET", "admin")
    assert status == 200 and 'action="/services/gpu-reclaim/admin/whatif"' in page
    status, page, _ = await browser.call("GET", "admin/whatif", params={"since": "3h", "until": "", "override": OVERRIDE})
    assert status == 200, page
    # live: dave reclaimed 15 min after his last use, erin kept (5 % is use); the override:
    # dave 5 min later, erin idle (below 9 %, but her loader ran on the GPU) after 20 min
    assert cell(page, "reclaims") == ("1", "2") and cell(page, "warnings") == ("1", "2")
    live, other = (float(v) for v in cell(page, "gpu_hours_freed"))
    assert live == pytest.approx(0.25, abs=0.01) and other == pytest.approx(0.17 + 0.66, abs=0.01)
    assert "Sessions treated differently (2)" in page
    rows = dict(re.findall(r'<tr data-session="([^"]+)">(.*?)</tr>', page))
    assert set(rows) == {"dave/", "erin/"}
    assert "(gpu-idle)" in rows["dave/"] and "(gpu-idle)" in rows["erin/"] and "<td>kept</td>" in rows["erin/"]
    # per rule: the reclaims, GPU-hours freed and users interrupted (none came back)
    assert re.search(r'<tr data-arm="override" data-rule="gpu-idle"><td>Override</td><td>gpu-idle</td><td>2</td>'
                     r'<td>0\.8\d</td><td>0</td>', page)
    # the chart, inline, and its numbers in a table
    assert '<svg class="whatif-chart"' in page and '<title id="whatif-chart-title">' in page
    assert '<table id="whatif-series" ' in page
    assert html.escape("idle_reclaim_after: 20m") in page  # the form keeps what was asked
    assert unchanged(hub) == before


async def test_a_what_if_is_a_bookmarkable_address_that_says_durations_in_words(hub, scene):
    """The form sends GET: the what-if's address carries its period and settings (never an
    XSRF token), opening it replays the same, and the settings read as set: 20m is
    "20 min", not 1200 seconds (issue 39)."""
    browser = scene["browser"]
    before = unchanged(hub)
    status, page, _ = await browser.call("GET", "admin/whatif")
    form = re.search(r'<form method="get" action="/services/gpu-reclaim/admin/whatif" class="whatif[^"]*">(.*?)</form>',
                     page, re.S)
    assert status == 200 and form and "_xsrf" not in form.group(1), page
    status, page, _ = await browser.call("GET", "admin/whatif", params={"since": "3h", "override": OVERRIDE})
    assert status == 200, page
    assert cell(page, "reclaims") == ("1", "2")
    assert "<code>idle_reclaim_after: 20 min</code>" in page and "<code>gpu_idle_threshold: 9.0</code>" in page
    assert "durations in seconds" not in page
    assert "<td><code>idle_reclaim_after</code></td><td>15 min</td>" in page  # the live policy's, 900 s
    link = html.unescape(re.search(r'<a class="whatif-link" href="([^"]+)"', page).group(1))
    status, again, _ = await browser.call("GET", link.removeprefix("/services/gpu-reclaim/"))
    assert status == 200 and cell(again, "reclaims") == ("1", "2") and cell(again, "gpu_hours_freed") == cell(
        page, "gpu_hours_freed")
    status, bad, _ = await browser.call("GET", "admin/whatif", params={"since": "3h", "override": "idle_reclaim_after: soon"})
    assert status == 400 and "idle_reclaim_after: " in bad and 'id="whatif-result"' not in bad
    assert unchanged(hub) == before


async def test_the_api_gives_the_same(scene):
    status, body = await scene["admin"].json("POST", "api/admin/whatif", {
        "since": "3h", "override": {"idle_reclaim_after": "20m", "gpu_idle_threshold": 9}})
    assert status == 200, body
    assert body["settings"] == {"idle_reclaim_after": 1200, "gpu_idle_threshold": 9.0}
    assert (body["live"]["reclaims"], body["override"]["reclaims"]) == (1, 2)
    assert body["differences_total"] == 2 and body["bucket_seconds"] == 3600
    erin, = (d for d in body["differences"] if d["session"] == "erin/")
    assert erin["live"]["reclaimed_at"] is None and erin["override"]["rule"] == "gpu-idle"
    assert erin["override"]["reclaimed_at"].endswith("Z")
    assert body["override"]["by_rule"]["gpu-idle"]["reclaims"] == 2 and body["override"]["users_interrupted"] == 0
    assert sum(b["override_freed"] for b in body["series"]) == pytest.approx(body["override"]["gpu_hours_freed"],
                                                                             abs=0.01)


@pytest.mark.parametrize("form, message", [
    ({"since": "3h", "override": "idle_reclaim_afterr: 2h"}, "unknown policy setting idle_reclaim_afterr (known: "),
    ({"since": "3h", "override": "idle_reclaim_after: soon"}, "idle_reclaim_after: "),
    ({"since": "3h", "override": "idle_warn_after: 3h"}, "idle_warn_after must not exceed idle_reclaim_after"),
    ({"since": "3h", "override": "idle_reclaim_after = 2h"}, "write one `setting: value` per line"),
    ({"since": "3h", "override": ""}, "no setting to change"),
    ({"since": "1h", "until": "3h", "override": "gpu_idle_threshold: 9"}, "the period is empty"),
    ({"since": "40d", "override": "gpu_idle_threshold: 9"}, "at most 31 days"),
    ({"since": "3h", "override": "idle_reclaim_after: 9999999d"},  # once a 500 (OverflowError)
     "idle_reclaim_after: 9,999,999 days is longer than a what-if replays: at most 366 days"),
    ({"since": "last week", "override": "gpu_idle_threshold: 9"}, "since: not a time or a duration"),
])
async def test_bad_input_is_refused_with_a_clear_error(hub, scene, form, message):
    browser = scene["browser"]
    before = unchanged(hub)
    status, page, _ = await browser.call("GET", "admin/whatif", params=form)
    assert status == 400 and html.escape(message, quote=False) in page, page
    assert 'id="whatif-result"' not in page and form["override"] in html.unescape(page)
    assert unchanged(hub) == before


async def test_the_api_refuses_bad_input(scene):
    admin = scene["admin"]
    for body, message in (({"since": "3h", "override": "gpu_idle_threshold: 9"}, "must be an object"),
                          ({"since": "3h", "override": {"gpu_idle_threshold": "high"}}, "gpu_idle_threshold: "),
                          ({"since": "3h", "override": {"x": 1}, "policy": {}}, "unknown field 'policy'"),
                          ({"since": 7, "override": {"gpu_idle_threshold": 9}}, "since: "),
                          ({"since": "3h", "override": {"warning_lead": "9999999d"}}, "warning_lead: 9,999,999 days"),
                          ({"since": "3h", "override": {"max_age": "9999999d"}}, "max_age: 9,999,999 days")):
        status, answer = await admin.json("POST", "api/admin/whatif", body)
        assert status == 400 and message in answer["message"], (body, answer)


async def test_only_admins_and_the_api_only_with_a_token_or_the_xsrf_token(hub, scene):
    status, _ = await scene["alice"].json("POST", "api/admin/whatif",
                                          {"since": "3h", "override": {"gpu_idle_threshold": 9}})
    assert status == 403
    status, page, _ = await scene["alice"].call("GET", "admin/whatif",
                                                params={"since": "3h", "override": "gpu_idle_threshold: 9"})
    assert status == 403 and "admins only" in page
    # the page is a GET (it changes nothing): a POST is not one of its methods
    status, page, _ = await scene["browser"].call("POST", "admin/whatif",
                                                  data={"since": "3h", "override": "gpu_idle_threshold: 9"})
    assert status == 405 and 'id="whatif-result"' not in page
    status, _ = await scene["browser"].json("POST", "api/admin/whatif",
                                            {"since": "3h", "override": {"gpu_idle_threshold": 9}})
    assert status == 403


def what_if_processes(hub) -> list[int]:
    """The what-if's own processes: multiprocessing's spawned children among the hub's
    descendants (the service's, as the hub runs it)."""
    found, todo = [], [hub.proc.pid]
    while todo:
        pid = todo.pop()
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # it ended meanwhile
    return found


async def killing_what_ifs(hub, request) -> tuple[int, list[int]]:
    """Kills the what-if's process (as the out-of-memory killer does) until `request` answers."""
    task, killed = asyncio.ensure_future(request), []
    while not task.done():
        for pid in what_if_processes(hub):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        await asyncio.sleep(0.02)
    return await task, killed


async def test_a_what_if_whose_process_dies_says_so(hub, scene):
    before = unchanged(hub)
    message = ("the what-if's process ended without an answer (killed by SIGKILL, as the out-of-memory "
               "killer kills); nothing was changed: try again, or replay a shorter period")
    (status, answer), killed = await killing_what_ifs(hub, scene["admin"].json(
        "POST", "api/admin/whatif", {"since": "3h", "override": {"gpu_idle_threshold": 9}}))
    assert killed and (status, answer) == (500, {"status": 500, "message": message})
    browser = scene["browser"]
    (status, page, _), killed = await killing_what_ifs(hub, browser.call(
        "GET", "admin/whatif", params={"since": "3h", "until": "", "override": OVERRIDE}))
    assert killed and status == 500 and f'role="alert">{message}</p>' in html.unescape(page), page
    assert unchanged(hub) == before
    status, _ = await scene["admin"].json("POST", "api/admin/whatif",  # the next one runs as usual
                                          {"since": "3h", "override": {"gpu_idle_threshold": 9}})
    assert status == 200
