"""The usage report page against the real hub and the service in it: two past days written
into the service's store as its cycles write them (alice's GPU used, then idle; a hostile
name's two GPUs), read back on the page, its CSV and its JSON as an admin (or the custom
scope) sees them, the figures those computed in tests/support from the same samples; a user
is refused, bad input gets a 400 that says why; the page in Chromium (its screenshot for
docs/report.md). The figures themselves, and Prometheus's days, are tested on a virtual
clock (tests/report/test_report_page_data.py)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
import pytest_asyncio
from playwright.async_api import expect

from jupyterhub_gpu_reclaim.store import Store

from ..support.browser import IMG, log_in, new_page
from ..support.live import api_fixture
from ..support.usage_record import HOSTILE_GROUP, HOSTILE_PROFILE, HOSTILE_USER, UTC, Recorded, expected_rows, fill
from ..support.web_client import PREFIX, TIMINGS, Client, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

api = api_fixture("module")
DAY = dt.timedelta(days=1)
TODAY = dt.datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
GAP = dt.timedelta(minutes=10)  # the test hub's cycles come every 2 s: 10 min at least
LONG = TIMINGS["idle_reclaim_after"] // 60  # the long stretches: its idle_reclaim_after, in steps


def scene() -> list[Recorded]:
    """Three days ago and the day before: alice used 1 h, then idle 5 h; the hostile name's
    two GPUs (one at 50 %, one idle) from 22:00 to 04:00 over midnight."""
    base = TODAY - 3 * DAY
    at = lambda day, hour: base + day * DAY + dt.timedelta(hours=hour)  # noqa: E731
    return [
        Recorded("alice/", 1, at(0, 9), at(0, 15), lambda t: (90.0 if t < at(0, 10) else 0.0,), "a100",
                 frozenset({"physics"})),
        Recorded(f"{HOSTILE_USER}/x", 2, at(0, 22), at(1, 4), lambda t: (50.0, 0.0), HOSTILE_PROFILE,
                 frozenset({HOSTILE_GROUP})),
    ]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def clients(hub, api):
    with Store.open(hub.info["store"]) as store:
        fill(store, scene(), TODAY)
    out = {user: Client(hub.info["url"], await user_token(api, user)) for user in ("admin", "carol", "alice")}
    yield out
    for c in out.values():
        await c.close()


def past(rows: list[dict]) -> dict:
    """The rows of the scene's days (the hub's own sessions run today)."""
    days = {(TODAY - i * DAY).date().isoformat() for i in (2, 3)}
    return {(r["day"], r["user"], r["profile"]): {k: float(r[k]) for k in ("held", "used", "idle", "no_reading",
                                                                              "idle_long")}
            for r in rows if r["day"] in days}


async def test_an_admin_sees_the_records_figures_and_downloads_them(clients):
    c = clients["admin"]
    expected = expected_rows(scene(), TODAY - 3 * DAY, TODAY, 1.0, LONG, GAP)
    status, text, r = await c.call("GET", "admin/report?days=7&format=json")
    assert status == 200 and r.headers["Content-Type"] == "application/json", text
    assert r.headers["Content-Disposition"].startswith('attachment; filename="gpu-usage-')
    report = json.loads(text)
    assert past(report["rows"]) == expected
    assert [d["source"] for d in report["by_day"]][-4:] == ["record"] * 4
    status, text, r = await c.call("GET", "admin/report?days=7&format=csv")
    assert status == 200 and r.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert r.headers["Content-Disposition"].endswith('.csv"')
    rows = list(csv.DictReader(io.StringIO(text)))
    assert past([{**row, "user": row["user"].removeprefix("'"), "profile": row["profile"].removeprefix("'"),
                  **{k: row[f"gpu_hours_{k}"] for k in ("held", "used", "idle", "no_reading", "idle_long")}}
                 for row in rows]) == expected
    assert {row["user"] for row in rows} >= {"alice", "'" + HOSTILE_USER}
    status, page, _ = await c.call("GET", "admin/report?days=7")
    assert status == 200 and 'class="report-chart"' in page and 'id="report-days"' in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;" in page and "No Prometheus is configured" in page


async def test_the_custom_scope_opens_it_and_a_user_is_refused(clients):
    status, _, _ = await clients["carol"].call("GET", "admin/report")
    assert status == 200
    for path in ("admin/report", "admin/report?format=csv", "admin/report?format=json"):
        status, text, _ = await clients["alice"].call("GET", path)
        assert status == 403 and "admins only" in text, path


@pytest.mark.parametrize("query, message", [
    ("days=0", "days: a whole number from 1 to 31, not &#39;0&#39;"),
    ("days=32", "days: a whole number from 1 to 31"),
    ("days=7d", "days: a whole number from 1 to 31"),
    ("format=xlsx", "format: one of html, csv, json, not &#39;xlsx&#39;"),
])
async def test_bad_input_is_refused_and_says_why(clients, query, message):
    status, text, _ = await clients["admin"].call("GET", f"admin/report?{query}")
    assert status == 400 and message in text, text


async def test_the_page_in_a_browser(hub, clients, browser):
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "admin")
        await page.goto(f"{hub.info['url']}{PREFIX}admin")
        await page.get_by_role("link", name="the GPU usage report").click()
        await expect(page.locator("h1")).to_have_text("GPU usage")
        await page.get_by_label("Period").select_option("14")
        await page.get_by_role("button", name="Show").click()
        await expect(page.locator("#report-days tbody tr")).to_have_count(14)
        await expect(page.locator("#report-users")).to_contain_text(HOSTILE_USER)
        await expect(page.locator("#report-groups")).to_contain_text(HOSTILE_GROUP)
        await expect(page.locator("svg.report-chart")).to_be_visible()
        await page.screenshot(path=str(IMG / "usage-report.png"), full_page=True)
    finally:
        await page.context.close()
