"""The usage report page against the real hub and the service in it, configured with a real
Prometheus (Debian's) holding two days of history (tests/support/report_history.py) before
the service's record began: two later days written into the service's store as its cycles
write them (alice's GPU used, then idle; a hostile name's two GPUs). As an admin (or the
custom scope) sees them on the page, its CSV and its JSON, each day from its source and the
figures those computed in tests/support from the same samples; a user is refused, bad input
gets a 400 that says why; the page in Chromium (its screenshot for docs/report.md). The
figures' rules are tested on a virtual clock (tests/report/test_report_page_data.py).

The module runs a hub of its own (`hub`, in place of the package's): its service reads GPUs
from that Prometheus (no server runs here), with the default's long idle stretches (2 h)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
import pytest_asyncio
from playwright.async_api import expect

from jupyterhub_gpu_reclaim.store import Store

from ..support.browser import IMG, log_in, new_page
from ..support.live import api_fixture
from ..support.prometheus_history import create_blocks, history_prometheus
from ..support.report_history import HOURS, SCHEMES, history_file, history_rows
from ..support.usage_record import (HOSTILE_GROUP, HOSTILE_PROFILE, HOSTILE_USER, UTC, Recorded, expected_rows, fill,
                                    reclaimed)
from ..support.web_client import PREFIX, Client, start_web_hub, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DAY = dt.timedelta(days=1)
TODAY = dt.datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
HISTORY = TODAY - 6 * DAY  # Prometheus's two days
BEGUN = TODAY - 4 * DAY + dt.timedelta(hours=18)  # the service's first cycle: its record from the next day
SCHEME = "honorlabels-true_ksm-2"
GAP = dt.timedelta(minutes=10)  # the test hub's cycles come every 2 s: 10 min at least
LONG = 120  # idle_reclaim_after, 2 h, in steps
WAITED = (TODAY - 3 * DAY + dt.timedelta(hours=12), TODAY - 3 * DAY + dt.timedelta(hours=13))  # 2 GPUs asked for


def scene() -> list[Recorded]:
    """Three days ago and the day before: alice used 1 h, then idle 5 h (reclaimed at 15:00);
    the hostile name's two GPUs (one at 50 %, one idle) from 22:00 to 04:00 over midnight;
    pods waiting for 2 GPUs from 12:00 to 13:00 (`WAITED`)."""
    base = TODAY - 3 * DAY
    at = lambda day, hour: base + day * DAY + dt.timedelta(hours=hour)  # noqa: E731
    return [
        Recorded("alice/", 1, at(0, 9), at(0, 15), lambda t: (90.0 if t < at(0, 10) else 0.0,), "a100",
                 frozenset({"physics"})),
        Recorded(f"{HOSTILE_USER}/x", 2, at(0, 22), at(1, 4), lambda t: (50.0, 0.0), HOSTILE_PROFILE,
                 frozenset({HOSTILE_GROUP})),
    ]


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("history")
    create_blocks(history_file(workdir, HISTORY.timestamp(), SCHEMES[SCHEME]), workdir / "data")
    with history_prometheus(workdir) as url:
        child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, prometheus_url=url, idle_reclaim_after=7200)
        child.info["prometheus"] = url
        try:
            yield child
        finally:
            child.stop(grace=60)


api = api_fixture("module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def clients(hub, api):
    with Store.open(hub.info["store"]) as store:
        store.record_observations(BEGUN, [], 0)  # the service's first cycle
        fill(store, scene(), TODAY, lambda t: 2 if WAITED[0] <= t < WAITED[1] else 0)
        reclaimed(store, "alice/", TODAY - 3 * DAY + dt.timedelta(hours=15), "stopped", 1)
    out = {user: Client(hub.info["url"], await user_token(api, user)) for user in ("admin", "carol", "alice")}
    yield out
    for c in out.values():
        await c.close()


def past(rows: list[dict]) -> dict:
    """The rows of the days before today (the service's own cycles run today)."""
    return {(r["day"], r["user"], r["profile"]): {k: float(r[k]) for k in ("held", "used", "idle", "no_reading",
                                                                              "idle_long")}
            for r in rows if r["day"] < TODAY.date().isoformat()}


async def test_an_admin_sees_the_figures_of_both_sources_and_downloads_them(hub, clients):
    c = clients["admin"]
    expected = history_rows(HISTORY.timestamp(), 60, HOURS * 60 + 1, SCHEMES[SCHEME])
    expected.update(expected_rows(scene(), TODAY - 3 * DAY, TODAY, 1.0, LONG, GAP))
    status, text, r = await c.call("GET", "admin/report?days=7&format=json")
    assert status == 200 and r.headers["Content-Type"] == "application/json", text
    assert r.headers["Content-Disposition"].startswith('attachment; filename="gpu-usage-')
    report = json.loads(text)
    assert past(report["rows"]) == expected
    # Prometheus for the days before the record's first whole day, the record from then
    assert [d["source"] for d in report["by_day"]] == ["prometheus"] * 3 + ["record"] * 4
    assert report["source"]["prometheus"] == hub.info["prometheus"]
    # queue and freed: Prometheus's (grace's wait for a GPU, 1 h, then 10 min starting; the estimate by the hub's policy: alice 6 h from
    # 2 h in, bob, never used, from 15 min in: 3.75 h + 4 h) and the record's (each cycle's waiting
    # GPUs; alice's reclaim frees her GPU for a day: 9 h, then 15 h)
    assert [(round(d["gpu_hours_waited"], 1), d["waits"], round(d["gpu_hours_freed"]), d["freed_is_estimate"])
            for d in report["by_day"][:5]] == [(1.0, 1, 10, True), (0, 0, 4, True), (0, 0, 0, True), (2, None, 9, False),
                                               (0, None, 15, False)]
    assert [(d["starts"], d["longest_start_h"]) for d in report["by_day"][:4]] == [(1, 0.17), (0, 0), (0, 0), (None, None)]
    status, text, _ = await c.call("GET", "admin/report?days=7&format=days-csv")
    assert status == 200 and text.splitlines()[0].endswith(
        "gpu_hours_freed,freed_is_estimate,gpu_hours_waited,waits,longest_wait_h,starts,longest_start_h")
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
    assert "&lt;b&gt;" in page and "Prometheus at" in page
    assert "(estimate)" in page and "Assumed:" in page and "Each pod&#39;s waits" in page


async def test_the_custom_scope_opens_it_and_a_user_is_refused(clients):
    status, _, _ = await clients["carol"].call("GET", "admin/report")
    assert status == 200
    for path in ("admin/report", "admin/report?format=csv", "admin/report?format=days-csv", "admin/report?format=json"):
        status, text, _ = await clients["alice"].call("GET", path)
        assert status == 403 and "admins only" in text, path


@pytest.mark.parametrize("query, message", [
    ("days=0", "days: a whole number from 1 to 31, not &#39;0&#39;"),
    ("days=32", "days: a whole number from 1 to 31"),
    ("days=7d", "days: a whole number from 1 to 31"),
    ("format=xlsx", "format: one of html, csv, days-csv, json, not &#39;xlsx&#39;"),
])
async def test_bad_input_is_refused_and_says_why(clients, query, message):
    status, text, _ = await clients["admin"].call("GET", f"admin/report?{query}")
    assert status == 400 and message in text, text


async def test_the_page_in_a_browser(hub, clients, browser):
    """As an admin reads it (issue 39): GPU time in words ("6 min", not "0.10"), the seven
    days before Prometheus's history as one row, a share-used column, the idle leaderboard,
    and the period control whole (its arrow, a data: image the page's CSP once refused,
    with an error in the console)."""
    page = await new_page(browser)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        await log_in(page, hub.info["url"], "admin")
        await page.goto(f"{hub.info['url']}{PREFIX}admin")
        await page.get_by_role("link", name="the GPU usage report").click()
        await expect(page.locator("h1")).to_have_text("GPU usage")
        await page.get_by_label("Period").select_option("14")
        await page.get_by_role("button", name="Show").click()
        # the days before Prometheus's history (a week at least) as one row
        status, text, _ = await clients["admin"].call("GET", "admin/report?days=14&format=json")
        days = json.loads(text)["by_day"]
        lead = next(i for i, d in enumerate(days) if d["held"] or d["gpu_hours_waited"] or d["gpu_hours_freed"])
        assert status == 200 and len(days) == 14 and lead >= 7, days
        first = page.locator("#report-days tbody tr").first
        await expect(first).to_have_class("empty-days")
        await expect(first).to_have_text(re.compile(
            rf"^{days[0]['day']} to {days[lead - 1]['day']}\s*Prometheus\s*{lead} days: no GPU held, no wait$"))
        rows = await page.locator("#report-days tbody tr").count()
        assert rows <= 14 - lead + 1, rows
        cells = await page.locator("#report-users td[data-sort], #report-days td[data-sort]").all_text_contents()
        assert cells and not [c for c in cells if re.fullmatch(r"\d+\.\d+", c)], cells  # no bare "0.10"
        assert any(re.fullmatch(r"\d+ (h|min)( \d+ min)?", c) for c in cells), cells
        await expect(page.locator("#report-users thead")).to_contain_text("share used")
        idle = [float(v) for v in await page.locator("#report-idle-leaders tbody tr td:nth-child(3)").evaluate_all(
            "cells => cells.map(c => c.dataset.sort)")]
        assert idle and idle == sorted(idle, reverse=True), idle
        arrow = await page.get_by_label("Period").evaluate("s => getComputedStyle(s).backgroundImage")
        assert arrow.startswith('url("data:image/svg+xml'), arrow
        assert problems == [], problems
        await expect(page.locator("#report-users")).to_contain_text(HOSTILE_USER)
        await expect(page.locator("#report-groups")).to_contain_text(HOSTILE_GROUP)
        await expect(page.locator("svg.report-chart")).to_be_visible()
        await expect(page.locator(".estimate")).to_contain_text("Estimate:")
        await page.screenshot(path=str(IMG / "usage-report.png"), full_page=True)
    finally:
        await page.context.close()
