"""The admin page as an admin reads it, in Chromium on the real hub and simulated cluster
(issue 39): alice (1 GPU), bob (2) and carol (1) hold all four GPUs, each kept alive by its
user; dave waits for one. The headline says capacity first, in a browser in New York's time
zone; the headers sort by value from the keyboard; the page is usable at 390 px; the
confirmation of *Reclaim now* names carol's keep-alive; and the open page follows the
reclaim and dave's start by itself, without a reload."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.browser import IMG, local_clock, log_in, low_contrast, times_in
from ..support.live import api_fixture
from ..support.pods import pod_phase
from ..support.service_hub import until
from ..support.web_client import PREFIX, Client, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NEW_YORK = ZoneInfo("America/New_York")
HOLDERS = {"alice": "gpu-1", "bob": "gpu-2", "carol": "gpu-1"}

api = api_fixture("module")


async def as_user(hub, api, user: str, method: str, path: str, body=None) -> tuple[int, dict]:
    c = Client(hub.info["url"], await user_token(api, user))
    try:
        return await c.json(method, path, body)
    finally:
        await c.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def story(hub, api, sim):
    """All four GPUs held, each kept alive for 2 h by its user (the tests' policy reclaims a
    GPU never used within a minute), and dave waiting for one."""
    # bob's two GPUs first: the default scheduler spreads (LeastAllocated), so alice's and
    # carol's one each, placed first, could take one GPU of each node and leave bob none
    await api.start("bob", HOLDERS["bob"])
    await api.wait_ready("bob")
    for user in ("alice", "carol"):
        await api.start(user, HOLDERS[user])
    await asyncio.gather(*(api.wait_ready(user) for user in ("alice", "carol")))

    async def seen(user: str) -> bool:
        status, body = await as_user(hub, api, user, "GET", "api/sessions")
        return status == 200 and bool(body["sessions"])
    for user in HOLDERS:
        await until(partial(seen, user), 30, f"the service sees {user}'s session")
        status, body = await as_user(hub, api, user, "PUT", f"api/sessions/{user}//intent", {"duration": "2h"})
        assert status == 200, body
    await api.start("dave", "gpu-1")
    await until(lambda: pod_phase(sim, "jupyter-dave") == "Unschedulable", 30, "dave's pod waits for a GPU")

    async def queued() -> bool:
        _, body = await as_user(hub, api, "admin", "GET", "api/admin/queue")
        return [q["session"] for q in body["queue"]] == ["dave/"]
    await until(queued, 30, "the service sees dave waiting")


async def admin_page(browser, hub, width: int = 1280, zone: str = "UTC") -> Page:
    context = await browser.new_context(viewport={"width": width, "height": 900}, timezone_id=zone)
    context.set_default_timeout(30_000)
    page = await context.new_page()
    await log_in(page, hub.info["url"], "admin")
    await page.wait_for_url(lambda u: "/hub/login" not in u)
    await page.goto(f"{hub.info['url']}{PREFIX}admin")
    return page


async def test_capacity_first_in_the_readers_time_zone(story, hub, browser):
    page = await admin_page(browser, hub, zone="America/New_York")
    try:
        headline = page.locator("#headline .capacity")
        await expect(headline).to_have_text(re.compile(
            r"^4 of 4 GPUs held, \d idle; 1 spawn waiting for 1 GPU(, expected free (\d{4}-\d\d-\d\d )?\d\d:\d\d \([^)]+\))?$"))
        # one state per row, in one sentence: carol is kept alive, with no reclaim time beside it
        carol = page.locator('#sessions tr[data-session="carol/"]')
        await expect(carol.locator("td.state .state-text")).to_have_text(re.compile(r"^kept alive until (\d{4}-\d\d-\d\d )?\d\d:\d\d"))
        assert "reclaim at" not in (await carol.locator("td.state").inner_text()).split("Details")[0]
        # every time on the page is New York's, UTC on hover
        times = await times_in(page.locator("main"))
        assert times
        for t in times:
            instant = parse_time(t["datetime"])
            assert instant is not None
            assert t["text"] == local_clock(instant, NEW_YORK), t
            assert t["title"] == instant.strftime("%Y-%m-%d %H:%M:%S UTC"), t
        # labelled controls: each exempt field by its label
        await expect(carol.get_by_label("Hours")).to_have_value("4")
        await page.screenshot(path=str(IMG / "admin-page.png"), full_page=True)
        # with its sessions in every state, legible in the hub's light and dark themes
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await expect(page.locator("html")).to_have_attribute("data-bs-theme", scheme)
            low = await low_contrast(page.locator("main"))
            assert low == [], (scheme, low)
    finally:
        await page.context.close()


async def rows(page: Page) -> list[str]:
    return await page.locator("#sessions tbody tr").evaluate_all("rs => rs.map(r => r.dataset.session)")


async def test_headers_sort_by_value_from_the_keyboard(story, hub, browser):
    page = await admin_page(browser, hub)
    try:
        gpus = page.locator("#sessions thead th", has_text="GPUs")
        await gpus.get_by_role("button").focus()
        await page.keyboard.press("Enter")
        await expect(gpus).to_have_attribute("aria-sort", "ascending")
        assert (await rows(page))[-1] == "bob/"  # 1, 1, 2
        await page.keyboard.press(" ")  # the same button, again: descending
        await expect(gpus).to_have_attribute("aria-sort", "descending")
        assert (await rows(page))[0] == "bob/"
        # the session's name: by text; the other headers say nothing of the order
        name = page.locator("#sessions thead th", has_text="Session")
        await page.keyboard.press("Shift+Tab")
        await expect(name.get_by_role("button")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(name).to_have_attribute("aria-sort", "ascending")
        await expect(gpus).not_to_have_attribute("aria-sort", re.compile(".*"))
        assert await rows(page) == ["alice/", "bob/", "carol/"]
    finally:
        await page.context.close()


async def test_usable_at_390_px(story, hub, browser):
    page = await admin_page(browser, hub, width=390)
    try:
        await expect(page.locator('#sessions tr[data-session="bob/"]')).to_be_visible()
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        for user in HOLDERS:
            row = page.locator(f'#sessions tr[data-session="{user}/"]')
            for cell in (row.locator("td.session"), row.locator("td.gpus"), row.locator("td.state .state-text"),
                         row.get_by_role("button", name="Reclaim now")):
                await expect(cell).to_be_visible()
                box = await cell.bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (user, box)
        await page.screenshot(path=str(IMG / "admin-page-390.png"), full_page=True)
    finally:
        await page.context.close()


async def test_the_confirmation_names_the_keep_alive_and_the_page_follows_the_reclaim(story, hub, api, browser):
    """The admin reclaims carol, whom carol kept alive: the confirmation says so. The page
    opened before, left alone, shows carol gone and dave running without a reload."""
    watching = await admin_page(browser, hub)
    page = await admin_page(browser, hub)
    try:
        await watching.evaluate("window.notReloaded = true")
        await expect(watching.locator('#queue tr[data-session="dave/"]')).to_be_visible()
        await page.locator('#sessions tr[data-session="carol/"]').get_by_role("button", name="Reclaim now").click()
        await expect(page.locator(".confirm-text")).to_contain_text("Reclaim carol/ now")
        await expect(page.locator(".keep-alive")).to_have_text(re.compile(
            # another day's time carries its date (a keep-alive past midnight in the browser's zone)
            r"^carol asked to keep this server alive until (\d{4}-\d\d-\d\d )?\d\d:\d\d \(in (1 h \d+ min|2 h)\); "
            r"reclaiming now overrides that\.$"))
        await page.get_by_role("button", name="Confirm").click()
        await expect(page.locator(".notice")).to_contain_text("reclaiming carol")
        await api.wait_ready("dave", timeout=120)  # the freed GPU goes to the queue
        # the page left open: carol gone, dave running, nobody waiting, the headline's numbers
        await expect(watching.locator('#sessions tr[data-session="dave/"]')).to_be_visible(timeout=60_000)
        await expect(watching.locator('#sessions tr[data-session="carol/"]')).to_have_count(0, timeout=60_000)
        await expect(watching.locator("#queue-live")).to_contain_text("Nobody waits", timeout=60_000)
        await expect(watching.locator("#headline .freed")).to_contain_text(
            re.compile(r"^1 reclaim freed 1 GPU in the last 7 days"), timeout=60_000)
        assert await watching.evaluate("window.notReloaded") is True
    finally:
        for p in (watching, page):
            await p.context.close()
