"""Pages in Debian's Chromium driven by Playwright (never a downloaded browser): how it is
launched (the `browser` fixture: tests/conftest.py), a page (in a time zone), the times a
page shows, a hub login, and where the screenshots go."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path
from zoneinfo import ZoneInfo

from playwright.async_api import Page

from .web_client import PASSWORD

CHROMIUM = "/usr/bin/chromium"  # Debian's; `playwright install` must never run here
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update"]
# the README's screenshots: GPU_RECLAIM_SCREENSHOTS=docs/img make test refreshes them;
# otherwise they go to a temporary folder and the working tree stays as it is
IMG = Path(os.environ.get("GPU_RECLAIM_SCREENSHOTS") or tempfile.mkdtemp(prefix="gpu-reclaim-screenshots-"))


async def new_page(browser, timezone_id: str = "UTC") -> Page:
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=timezone_id)
    context.set_default_timeout(30_000)
    return await context.new_page()


async def times_in(where) -> list[dict[str, str]]:
    """Each `<time>` in a locator (of a page or a frame) as the reader sees it: its instant
    (`datetime`), its hover text (`title`), its text, and the text right after it (`after`:
    how soon or how long ago, " (in 3 min)")."""
    return await where.locator("time[datetime]").evaluate_all(
        """els => els.map(e => ({datetime: e.getAttribute('datetime'), title: e.title, text: e.textContent,
                                after: e.nextSibling && e.nextSibling.nodeType === 3 ? e.nextSibling.textContent : ''}))""")


def local_clock(instant: dt.datetime, zone: ZoneInfo) -> str:
    """What a `<time>` of `instant` reads in a browser in `zone` (static/localtime.js): its
    clock today, with its date on another day."""
    local = instant.astimezone(zone)
    return local.strftime("%H:%M" if local.date() == dt.datetime.now(zone).date() else "%Y-%m-%d %H:%M")


async def log_in(page: Page, url: str, user: str) -> None:
    await page.goto(f"{url}/hub/login")
    await page.get_by_label("Username").fill(user)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()


async def show(page: Page, state: str) -> None:
    """The tab put in the background ("hidden") or in front ("visible"), as the Page
    Visibility API tells a page: its visibilityState, then a visibilitychange event."""
    await page.evaluate("""state => {
        Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => state});
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => state === 'hidden'});
        document.dispatchEvent(new Event('visibilitychange'));
    }""", state)
