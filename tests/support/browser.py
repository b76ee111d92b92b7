"""Pages in Debian's Chromium driven by Playwright (never a downloaded browser): how it is
launched (the `browser` fixture: tests/conftest.py), a page, a hub login, and where the
screenshots go."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from playwright.async_api import Page

from .web_client import PASSWORD

CHROMIUM = "/usr/bin/chromium"  # Debian's; `playwright install` must never run here
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update"]
# the README's screenshots: GPU_RECLAIM_SCREENSHOTS=docs/img make test refreshes them;
# otherwise they go to a temporary folder and the working tree stays as it is
IMG = Path(os.environ.get("GPU_RECLAIM_SCREENSHOTS") or tempfile.mkdtemp(prefix="gpu-reclaim-screenshots-"))


async def new_page(browser) -> Page:
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="UTC")
    context.set_default_timeout(30_000)
    return await context.new_page()


async def log_in(page: Page, url: str, user: str) -> None:
    await page.goto(f"{url}/hub/login")
    await page.get_by_label("Username").fill(user)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
