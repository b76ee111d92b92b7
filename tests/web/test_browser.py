"""The web pages in a real browser (Debian's Chromium driven by Playwright; never a
downloaded browser) on the real hub + simulated cluster with the package's hub templates.

alice logs in, starts a 1-GPU server from the spawn page, sees its reclaim state on the
hub's home page; her never-used GPU is warned after 15 s and every hub page shows the
banner; she keeps it alive with the control on the home page and the intent is stored and
shown. With all four GPUs taken (alice 1, bob 2, carol 1) dave waits for one: the admin
sees the candidates and the queue and reclaims carol with the button (confirmed); dave's
spawn proceeds, and carol's home page says what happened until she has seen it. alice cannot
open the admin page. Screenshots go to $GPU_RECLAIM_SCREENSHOTS (docs/img for the README)."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.timestamps import parse_time
from jupyterhub_gpu_reclaim.wording import clock, relative

from ..support.live import api_fixture
from ..support.service_hub import until
from ..support.web_client import PREFIX, Client, user_token
from ..support.browser import IMG, log_in, low_contrast, new_page, times_in
from ..support.pods import pod_phase

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

GPU_PROFILE = "1 × NVIDIA A100 (40 GB)"
UTC = dt.timezone.utc


api = api_fixture("module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def alice(hub, browser):
    page = await new_page(browser)
    await log_in(page, hub.info["url"], "alice")
    yield page
    await page.context.close()


async def state_of(hub, api, user: str) -> str | None:
    c = Client(hub.info["url"], await user_token(api, user))
    try:
        _, body = await c.json("GET", "api/sessions")
    finally:
        await c.close()
    return body["sessions"][0]["state"] if body.get("sessions") else None


async def test_user_starts_a_gpu_server_and_sees_its_state_on_the_hub_home_page(hub, api, alice):
    page, url = alice, hub.info["url"]
    await page.wait_for_url(re.compile(r"/hub/spawn$"))
    await page.get_by_label(GPU_PROFILE).check()
    await page.get_by_role("button", name="Start").click()
    # the pending page moves on to JupyterLab by itself once ready; navigating before it
    # does races that navigation
    await page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=120_000)
    await api.wait_ready("alice", timeout=120)
    await until(lambda: state_of(hub, api, "alice"), 30, "the service sees alice's session")
    await page.goto(f"{url}/hub/home")
    panel = page.frame_locator("#gpu-reclaim-home")
    # the panel logs in to the service (OAuth, no confirmation) and shows the state
    await expect(panel.locator('section.session[data-session="alice/"] .state-text')).to_have_text(
        re.compile(r"active|idle|warned: reclaim at"), timeout=30_000)
    await expect(panel.get_by_text("Keep alive until…")).to_be_visible()
    await expect(page.locator("#gpu-reclaim-state-default")).to_contain_text("GPU: ")
    # the service's login worked with its cookies same-site only (SameSite=Lax)
    service_cookies = [k for k in await page.context.cookies() if k["path"].startswith(PREFIX.rstrip("/"))]
    assert {k["name"] for k in service_cookies} >= {"service-gpu-reclaim", "_xsrf"}
    assert {k["sameSite"] for k in service_cookies} == {"Lax"}


async def test_warned_session_shows_the_banner_on_hub_pages(hub, api, alice):
    page, url = alice, hub.info["url"]
    await until(lambda: _is(state_of(hub, api, "alice"), "warned"), 60, "alice's GPU session is warned")
    await page.goto(f"{url}/hub/home")
    banner = page.locator("#gpu-reclaim-banner")
    await expect(banner).to_have_attribute("data-warned", "yes", timeout=30_000)
    frame = page.frame_locator("#gpu-reclaim-banner")
    await expect(frame.locator(".banner.warned")).to_contain_text(
        re.compile(r"Your GPU session.* will be reclaimed at \d\d:\d\d \(in \d+ (min|s)\): "
                   r"nothing has run on the GPU since \d\d:\d\d .*Keep it alive"))
    await page.screenshot(path=str(IMG / "hub-home-banner.png"), full_page=True)
    # on other hub pages too
    await page.goto(f"{url}/hub/token")
    await expect(page.locator("#gpu-reclaim-banner")).to_have_attribute("data-warned", "yes", timeout=30_000)


# how soon or how long ago, after a time: " (in 3 min)", " (40 s ago)", " (now)"
RELATIVE = re.compile(r"^ \((in [^()]+|[^()]+ ago|now)\)")


async def said_in(where) -> tuple[str, list[dict[str, str]]]:
    """A sentence on a page: its words without the "how long ago" (which moves by the
    second) and its times (`times_in`)."""
    times = await times_in(where)
    text = await where.text_content() or ""
    for t in times:
        text = text.replace(t["text"] + t["after"], t["text"] + RELATIVE.sub("", t["after"]), 1)
    return text, times


def read_in(zone: ZoneInfo, t: dict[str, str], read: tuple[dt.datetime, dt.datetime]) -> dt.datetime:
    """A `<time>` as a reader in `zone` must see it between the times `read` of its page's
    loads: the clock in the zone (with its date on another day), UTC on hover, and how soon
    or how long ago as the service computes it (wording.relative) at some moment of `read`.
    Its instant."""
    instant = parse_time(t["datetime"])
    assert instant is not None
    local = instant.astimezone(zone)
    today = read[1].astimezone(zone).date()
    assert t["text"] == local.strftime("%H:%M" if local.date() == today else "%Y-%m-%d %H:%M"), t
    assert t["text"] != instant.strftime("%H:%M"), t  # not UTC's
    assert t["title"] == instant.strftime("%Y-%m-%d %H:%M:%S UTC"), t
    seconds = int((read[1] - read[0]).total_seconds()) + 2
    rel = RELATIVE.match(t["after"])
    assert rel and rel.group(1) in {relative(instant, read[0] + dt.timedelta(seconds=k)) for k in range(seconds)}, t
    return instant


async def test_one_clock_in_another_time_zone(hub, api, browser):
    """A browser in New York: every time on the hub page's banner, the home page's panel, the
    user page and the admin page is New York's, with UTC on hover; the warned session's
    reclaim time and its why read the same on each, and as the API says them in UTC."""
    url, zone = hub.info["url"], ZoneInfo("America/New_York")
    pages = [await new_page(browser, "America/New_York") for _ in range(2)]
    page, admin = pages
    try:
        await log_in(page, url, "alice")
        await log_in(admin, url, "admin")
        await page.goto(f"{url}/hub/home")  # the panel logs in to the service; the banner shows from then on
        await expect(page.frame_locator("#gpu-reclaim-home").locator("p.more")).to_be_visible()
        start = dt.datetime.now(UTC)
        await page.goto(f"{url}/hub/home")
        await expect(page.locator("#gpu-reclaim-banner")).to_have_attribute("data-warned", "yes")
        banner = page.frame_locator("#gpu-reclaim-banner").locator(".banner.warned")
        card = page.frame_locator("#gpu-reclaim-home").locator('section.session[data-session="alice/"]')
        await expect(card.locator(".reason")).to_be_visible()
        said = {"banner": await said_in(banner.locator(".reason")), "home": await said_in(card.locator(".reason"))}
        reclaim = {"banner": (await times_in(banner))[0], "home": (await times_in(card.locator(".state-text")))[0]}
        await page.goto(f"{url}{PREFIX}")
        mine = page.locator('section.session[data-session="alice/"]')
        said["user page"] = await said_in(mine.locator(".reason"))
        reclaim["user page"] = (await times_in(mine.locator(".state-text")))[0]
        await expect(mine.locator(".tz")).to_have_text("America/New_York")  # the keep-alive's time field
        await admin.goto(f"{url}{PREFIX}admin")
        reclaim["admin page"] = (await times_in(admin.locator('#sessions tr[data-session="alice/"] .state-text')))[0]
        c = Client(url, await user_token(api, "alice"))
        try:
            _, body = await c.json("GET", "api/sessions")
        finally:
            await c.close()
        read = (start, dt.datetime.now(UTC))
    finally:
        for p in pages:
            await p.context.close()
    session, = body["sessions"]
    assert session["state"] == "warned"
    # the reclaim time: one instant, one clock
    for where, t in reclaim.items():
        assert t["datetime"] == session["reclaim_at"], where
        assert read_in(zone, t, read) and t["text"] == reclaim["banner"]["text"], where
    # why: the same words everywhere, in plain words, no rule's name; the API's in UTC
    words, times = said["banner"]
    assert words.startswith("nothing has run on the GPU since") and "gpu-never-used" not in words
    for where, (text, at) in said.items():
        assert text == words and [t["datetime"] for t in at] == [t["datetime"] for t in times], where
        for t in at:
            read_in(zone, t, read)
    in_utc = session["why"]
    for t in times:  # the API's "13:22 UTC (38 s ago)" is the pages' "08:22"
        instant = parse_time(t["datetime"])
        assert instant is not None
        in_utc = re.sub(re.escape(clock(instant, read[1])) + r" \([^()]+\)", t["text"], in_utc, count=1)
    assert in_utc == words


async def _is(value, expected):
    return (await value) == expected


async def test_keep_alive_from_the_hub_home_page_is_stored_and_shown(hub, api, alice):
    page, url = alice, hub.info["url"]
    await page.goto(f"{url}/hub/home")
    panel = page.frame_locator("#gpu-reclaim-home")
    await panel.get_by_role("button", name="2 h").click()
    await expect(panel.locator(".notice")).to_contain_text("kept alive until")
    await expect(panel.locator('section.session[data-session="alice/"] .state-text')).to_contain_text(
        "kept alive until")
    with Store.open(hub.info["store"]) as s:
        intent = s.intents()["alice/"]
    assert abs(intent.until - dt.datetime.now(UTC) - dt.timedelta(hours=2)) < dt.timedelta(minutes=2)
    # the banner goes away once the cycle has seen the intent
    await until(lambda: _is(state_of(hub, api, "alice"), "kept"), 30, "alice's session kept")
    await page.goto(f"{url}/hub/home")
    await expect(page.locator("#gpu-reclaim-banner")).to_have_attribute("data-warned", "no", timeout=30_000)
    # the user page, reached from the warning link, with the session selected
    await page.goto(f"{url}{PREFIX}keepalive?session=alice/")
    await expect(page.locator("section.session.selected")).to_have_attribute("data-session", "alice/")
    await expect(page.locator("section.session.selected .state-text")).to_contain_text("kept alive until")
    await expect(page.locator("section.session.selected svg.spark")).to_be_visible()
    await page.screenshot(path=str(IMG / "user-page.png"), full_page=True)


async def test_keep_alive_works_without_javascript(hub, browser):
    context = await browser.new_context(java_script_enabled=False, timezone_id="UTC")
    context.set_default_timeout(30_000)
    page = await context.new_page()
    try:
        await log_in(page, hub.info["url"], "alice")
        await page.goto(f"{hub.info['url']}{PREFIX}")
        section = page.locator('section.session[data-session="alice/"]')
        await section.get_by_role("button", name="1 h").click()
        await expect(page.locator(".notice")).to_contain_text("kept alive until")
        await expect(section.locator(".state-text")).to_contain_text("kept alive until")
    finally:
        await context.close()
    with Store.open(hub.info["store"]) as s:
        intent = s.intents()["alice/"]
    assert abs(intent.until - dt.datetime.now(UTC) - dt.timedelta(hours=1)) < dt.timedelta(minutes=2)


HUB_STYLESHEET = "/hub/static/css/style.min.css"


async def _looks(page: Page) -> dict:
    """The page's theme, its background and how the hub's Bootstrap styles its buttons."""
    return await page.evaluate("""() => {
        const btn = (sel) => { const b = document.querySelector(sel);
            return b && getComputedStyle(b).getPropertyValue("--bs-btn-padding-x").trim(); };
        return {theme: document.documentElement.getAttribute("data-bs-theme"),
                background: getComputedStyle(document.body).backgroundColor,
                navbar: !!document.querySelector("nav.navbar #dark-theme-toggle.btn"),
                toggle: btn("#dark-theme-toggle"), content: btn("form.whatif .btn")};
    }""")


def _brightness(css_color: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return (r + g + b) / 3


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_pages_wear_the_hubs_bootstrap_and_its_theme(hub, browser, scheme):
    """The user and admin pages load the hub's own stylesheet (its Bootstrap, from the hub's
    static files), its rules apply to their buttons, and the browser's prefers-color-scheme
    picks the hub's light or dark theme (the hub's darkmode.js); every text, the hub's spawn
    page's too, reads at WCAG AA's contrast. The home page's panel, the
    service's page in a frame, wears the hub page's theme. No script error, no refused or
    failed request."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="UTC",
                                        color_scheme=scheme)
    context.set_default_timeout(30_000)
    page = await context.new_page()
    try:
        problems: list[str] = []
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        await log_in(page, hub.info["url"], "admin")
        await page.wait_for_url(lambda u: "/hub/login" not in u)
        # a hub page before the first visit to the service: its banner is empty, not a 403
        # (it never starts a login: issue 39)
        await page.goto(f"{hub.info['url']}/hub/token")
        await expect(page.locator("#gpu-reclaim-banner")).to_have_attribute("data-warned", "no")
        assert problems == [], problems
        stylesheets: list[tuple[str, int]] = []
        page.on("response", lambda r: stylesheets.append((r.url, r.status))
                if r.url.split("?")[0].endswith(HUB_STYLESHEET) else None)
        await page.goto(f"{hub.info['url']}{PREFIX}")
        # the very file the hub's own pages load (so the browser has it cached from them)
        assert stylesheets and all(status in (200, 304) for _, status in stylesheets), stylesheets
        css = await page.request.get(stylesheets[0][0])
        assert css.status == 200 and css.headers["content-type"].startswith("text/css")
        assert "Bootstrap" in await css.text()
        for path, button in (("", None), ("admin", "Replay the history")):
            stylesheets.clear()
            response = await page.goto(f"{hub.info['url']}{PREFIX}{path}")
            assert response is not None and response.status == 200
            # fetched again or confirmed unchanged by the hub (the browser's cached copy)
            assert stylesheets and all(status in (200, 304) for _, status in stylesheets), stylesheets
            if button:
                await expect(page.get_by_role("button", name=button)).to_be_visible()
            looks = await _looks(page)
            assert looks["navbar"] and looks["toggle"] == "0.5rem", looks  # Bootstrap's .btn-sm
            if button:
                assert looks["content"] == "0.75rem", looks  # its .btn
            assert looks["theme"] == scheme, looks
            brightness = _brightness(looks["background"])
            assert brightness < 64 if scheme == "dark" else brightness > 224, looks
            # every text reads at WCAG AA's contrast in either theme (issue 39)
            assert await low_contrast(page.locator("body")) == [], path
        await page.goto(f"{hub.info['url']}{PREFIX}admin/report")
        await expect(page.locator("html")).to_have_attribute("data-bs-theme", scheme)
        assert await low_contrast(page.locator("body")) == [], "admin/report"
        # the hub's spawn page, where the form says what is free: its Start button too (the
        # hub's white on orange reads 2.85:1; hub_templates/spawn.html, issue 39)
        await page.goto(f"{hub.info['url']}/hub/spawn")
        await expect(page.get_by_role("button", name="Start")).to_be_visible()
        assert await low_contrast(page.locator("body")) == [], "hub/spawn"
        # the home page's panel follows the hub page's theme
        await page.goto(f"{hub.info['url']}/hub/home")
        panel = page.frame_locator("#gpu-reclaim-home")
        await expect(panel.locator("p.more")).to_be_visible()
        await expect(panel.locator("html")).to_have_attribute("data-bs-theme", scheme)
        # the toggle on the service's page is the hub's: the choice holds on the hub's pages
        # too, and the panel framed there follows it
        other = "light" if scheme == "dark" else "dark"
        await page.goto(f"{hub.info['url']}{PREFIX}")
        await page.locator("#dark-theme-toggle").click()
        await expect(page.locator("html")).to_have_attribute("data-bs-theme", other)
        await page.goto(f"{hub.info['url']}/hub/home")
        await expect(page.locator("html")).to_have_attribute("data-bs-theme", other)
        await expect(panel.locator("html")).to_have_attribute("data-bs-theme", other)
        await page.locator("#dark-theme-toggle").click()  # on the hub's page, live in the panel
        await expect(panel.locator("html")).to_have_attribute("data-bs-theme", scheme)
        assert problems == [], problems
    finally:
        await context.close()


async def test_admin_sees_candidates_and_queue_and_reclaims_with_the_button(hub, api, browser, sim):
    # bob's two GPUs before carol's one: the default scheduler spreads (LeastAllocated), so carol
    # placed first could leave bob no node
    await api.start("bob", "gpu-2")
    await api.wait_ready("bob")
    await api.start("carol", "gpu-1")
    await api.wait_ready("carol")
    await api.start("dave", "gpu-1")
    await until(lambda: pod_phase(sim, "jupyter-dave") == "Unschedulable", 30, "dave's pod waits for a GPU")

    async def queued():
        c = Client(hub.info["url"], await user_token(api, "admin"))
        try:
            _, b = await c.json("GET", "api/admin/queue")
        finally:
            await c.close()
        return [q["session"] for q in b["queue"]] == ["dave/"]
    await until(queued, 30, "the service sees dave waiting")

    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "admin")
        await page.goto(f"{hub.info['url']}{PREFIX}admin")
        await expect(page.locator('#sessions tr[data-session="alice/"]')).to_be_visible()
        await expect(page.locator('#sessions tr[data-session="carol/"]')).to_be_visible()
        await expect(page.locator('#queue tr[data-session="dave/"]')).to_contain_text("dave")
        await expect(page.locator("#gpus-held")).to_have_text("4")
        # filter and sort (the small script; the table works without it)
        await page.locator("input.table-filter").fill("carol")
        await expect(page.locator('#sessions tr[data-session="alice/"]')).to_be_hidden()
        await page.locator("input.table-filter").fill("")
        # reclaim carol: the button, then the confirmation
        await page.locator('#sessions tr[data-session="carol/"]').get_by_role("button", name="Reclaim now").click()
        await expect(page.locator(".confirm-text")).to_contain_text("Reclaim carol/ now")
        await page.get_by_role("button", name="Confirm").click()
        await expect(page.locator(".notice")).to_contain_text(re.compile(r"reclaiming carol(?!/)"))
    finally:
        await page.context.close()
    await until(lambda: _none(api.server("carol")), 60, "carol's server stopped")
    await api.wait_ready("dave", timeout=120)  # the freed GPU goes to the queue
    with Store.open(hub.info["store"]) as s:
        r, = [r for r in s.reclaims() if r.session == "carol/"]
        assert r.rule == "admin" and r.outcome == "stopped"
        assert [(a.actor, a.action) for a in s.audit_log(session="carol/")] == [("admin", "reclaim")]


async def test_after_a_reclaim_the_home_page_says_what_happened_until_seen(hub, api, browser):
    """carol's server was reclaimed (the test above): her home page says when and why, what
    was kept and lost, with Start again (the hub's spawn page) until she has seen it. Nobody
    else can mark it seen."""
    with Store.open(hub.info["store"]) as s:
        reclaim, = [r for r in s.reclaims() if r.session == "carol/"]
    # alice (a token holder, no browser) cannot mark carol's reclaim seen: 404, nothing changes
    c = Client(hub.info["url"], await user_token(api, "alice"))
    try:
        status, _, _ = await c.call("POST", "embed/home/seen", data={"reclaim": str(reclaim.id), "then": "dismiss"})
        assert status == 404
        status, body, _ = await c.call("POST", "embed/home/seen", data={"reclaim": "1 or 1=1", "then": "dismiss"})
        assert status == 400 and "reclaim: the number of a reclaim" in body
    finally:
        await c.close()
    with Store.open(hub.info["store"]) as s:
        assert [r.id for r in s.unseen_reclaims("carol", reclaim.t)] == [reclaim.id]

    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "carol")
        await page.goto(f"{hub.info['url']}/hub/home")
        notice = page.frame_locator("#gpu-reclaim-home").locator(f'.reclaimed[data-reclaim="{reclaim.id}"]')
        await expect(notice).to_contain_text("Your server was stopped at ")
        await expect(notice).to_contain_text("an admin (admin) reclaimed it")
        await expect(notice).to_contain_text("Kept: files under your home directory")
        await page.screenshot(path=str(IMG / "home-after-reclaim.png"), full_page=True)
        # her page's history says why, in words, not the rule's name
        await page.goto(f"{hub.info['url']}{PREFIX}")
        await expect(page.locator("table.reclaims td.why")).to_have_text(["an admin (admin) reclaimed it"])
        await page.goto(f"{hub.info['url']}/hub/home")  # the notice again (a locator finds it anew)
        await notice.get_by_role("button", name="Start again").click()
        await page.wait_for_url(re.compile(r"/hub/spawn/carol$"))
        await page.goto(f"{hub.info['url']}/hub/home")
        await expect(page.frame_locator("#gpu-reclaim-home").locator(".more")).to_be_visible()
        await expect(page.frame_locator("#gpu-reclaim-home").locator(".reclaimed")).to_have_count(0)
    finally:
        await page.context.close()
    with Store.open(hub.info["store"]) as s:
        assert s.unseen_reclaims("carol", reclaim.t) == []
        assert next(r for r in s.reclaims() if r.id == reclaim.id).seen_at is not None


async def _none(value):
    return (await value) is None


async def test_non_admin_cannot_open_the_admin_page(hub, alice):
    response = await alice.goto(f"{hub.info['url']}{PREFIX}admin")
    assert response.status == 403
    await expect(alice.get_by_text("admins only")).to_be_visible()
