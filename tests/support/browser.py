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


# WCAG 2.1's contrast ratio (1.4.3) of an element's text colour against the first opaque
# background behind it (a colour with alpha blended over that background)
_RATIO = """
  const rgba = c => { const v = (c.match(/[\\d.]+/g) || [0, 0, 0, 0]).map(Number); return v.length > 3 ? v : [...v, 1]; };
  const lum = ([r, g, b]) => [r, g, b].map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) return c;
    }
    return [255, 255, 255, 1];
  };
  const ratio = el => {
    const bg = background(el), fg = rgba(getComputedStyle(el).color);
    const seen = fg.slice(0, 3).map((v, i) => fg[3] * v + (1 - fg[3]) * bg[i]);
    const [a, b] = [lum(seen), lum(bg)];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  };
"""
#: the contrast ratio of the element a selector picks
CONTRAST = f"selector => {{ {_RATIO} return ratio(document.querySelector(selector)); }}"
#: each visible element, the root and those under it, whose own text reads below WCAG AA: 4.5:1, or 3:1
#: for large text (24 px, or 18.66 px bold)
LOW_CONTRAST = f"""root => {{ {_RATIO}
  document.getAnimations().forEach(a => a.finish());  // a theme just switched: its colors' transitions ended
  return [root, ...root.querySelectorAll('*')].filter(e => !e.closest('svg') && e.getClientRects().length
      && getComputedStyle(e).visibility !== 'hidden'
      && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
    .map(e => {{ const s = getComputedStyle(e), large = parseFloat(s.fontSize) >= 24
                   || (parseFloat(s.fontSize) >= 18.66 && Number(s.fontWeight) >= 700);
                 return {{text: e.textContent.trim().slice(0, 60), ratio: Math.round(ratio(e) * 100) / 100,
                          color: s.color, need: large ? 3 : 4.5}}; }})
    .filter(r => r.ratio < r.need);
}}"""


async def low_contrast(where) -> list[dict]:
    """The text under a locator (of a page or a frame) that reads below WCAG AA (LOW_CONTRAST)."""
    return await where.evaluate(LOW_CONTRAST)


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
