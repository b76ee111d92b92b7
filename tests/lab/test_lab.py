"""The JupyterLab extension (labextension/ and lab/jupyterhub_gpu_reclaim_lab) in Chromium, on
the real hub + simulated cluster + service, its servers wired as docs/lab.md says
(tests/lab/jupyterhub_config_lab.py).

alice's GPU server shows its GPU state in the status bar, with a sparkline of the last two
hours and the idle threshold dashed; her never-used GPU is warned and JupyterLab raises the
notification; Keep alive 2 h records the intent (the service's API and its admin page show
it) and the notification goes away. carol's first minute of idleness reads "idle <1 min";
her warning goes away by itself once her GPU is used again. bob's warned server is stopped from the
notification's Stop now, through the hub; frank keeps his until a time, which
must be within the service's cap. dave's server is not told where the
service is: no status, no notification. The extension's polling is not the server's activity,
a tab in the background polls nothing, and a server's token reaches only its own user's
sessions.

The servers start together, so that the service's 15 s before a warning run side by side
rather than one test after another: the cluster's four GPUs are alice's, bob's, frank's and
carol's, and dave's server takes bob's once he has freed it."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from pathlib import Path
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from jupyterhub_gpu_reclaim.timestamps import parse_time
from jupyterhub_gpu_reclaim_lab import LABEXTENSION

from ..support.live import LAB, api_fixture
from ..support.service_hub import until
from ..support.web_client import PREFIX, Client, start_web_hub, user_token
from ..support.browser import CONTRAST, IMG, local_clock, log_in, new_page, show
from ..support.lab_page import COUNT_POLLS, STATUS, WARNING, service_session, warned

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
BUILD = LAB / "jupyterhub_gpu_reclaim_lab" / "labextensions" / LABEXTENSION  # scripts/setup.sh
GPU = "gpu-1"
UTC = dt.timezone.utc
SPARK = f"{STATUS} svg.jp-GpuReclaim-spark"
SPARK_HEIGHT = 16  # labextension/src/index.ts
# the servers the tests open, started together (`servers`); dave's takes bob's GPU
SERVERS = {"alice": GPU, "bob": GPU, "frank": GPU, "carol": GPU, "erin": "cpu"}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    if not (BUILD / "package.json").is_file():
        pytest.fail(f"the JupyterLab extension is not built ({BUILD}): run scripts/setup.sh")
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, hub_config=HERE / "jupyterhub_config_lab.py")
    yield child
    child.stop(grace=60)


api = api_fixture("module")


async def server_get(hub, api, user: str, path: str) -> dict:
    """GET /user/USER/PATH through the hub's proxy with the user's token."""
    headers = {"Authorization": f"token {await user_token(api, user)}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.get(f"{hub.info['url']}/user/{user}/{path}") as r:
            assert r.status == 200, (path, r.status, await r.text())
            return await r.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(api):
    """Every server of SERVERS, started at once and ready."""
    await asyncio.gather(*(api.start(user, profile) for user, profile in SERVERS.items()))
    await asyncio.gather(*(api.wait_ready(user) for user in SERVERS))


async def open_lab(hub, api, browser, user: str) -> Page:
    """A new browser's JupyterLab on the user's server, once it is ready."""
    await api.wait_ready(user)
    page = await new_page(browser)
    await log_in(page, hub.info["url"], user)
    await page.goto(f"{hub.info['url']}/user/{user}/lab")
    await expect(page.locator("#jp-main-statusbar")).to_be_visible(timeout=60_000)
    return page


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def alice(hub, api, browser, servers):
    page = await open_lab(hub, api, browser, "alice")
    yield page
    await page.context.close()


async def test_status_bar_shows_the_gpu_state(hub, api, alice):
    await until(lambda: service_session(hub, api, "alice"), 30, "the service sees alice's session")
    status = await server_get(hub, api, "alice", "gpu-reclaim/status")
    assert status["available"] is True and status["session"]["gpus"] == 1, status
    await expect(alice.locator(STATUS)).to_have_text(re.compile(r"^GPU (idle (<1|\d+) min|\d)"), timeout=30_000)


async def test_status_bar_draws_the_last_two_hours_with_the_idle_threshold(hub, api, alice):
    """The series the service's API gives (`spark`, the user page's sparkline), drawn in the
    browser: the never-used GPU's 0 % as a line (or a dot while there is one sample), the
    session's idle threshold as a dashed line at its height, the words for a screen reader."""
    own = await until(lambda: service_session(hub, api, "alice"), 30, "the service sees alice's session")
    status = (await server_get(hub, api, "alice", "gpu-reclaim/status"))["session"]
    assert len(status["spark"]) == len(own["spark"]) == 60, status
    assert status["idle_threshold"] == own["idle_threshold"] is not None
    threshold = own["idle_threshold"]
    spark = alice.locator(SPARK)
    await expect(spark).to_have_attribute("aria-label", re.compile(
        rf"^GPU utilization over the last 2 h, latest 0 %; idle below {threshold:g} %$"), timeout=30_000)
    await expect(spark.locator("polyline, circle").first).to_be_attached()
    dashed = spark.locator("line.jp-GpuReclaim-spark-threshold")
    await expect(dashed).to_have_attribute("stroke-dasharray", "3 2")
    # as web/render.py places it: 0 % at the bottom, 100 % at the top
    expected_y = SPARK_HEIGHT - 1 - threshold / 100 * (SPARK_HEIGHT - 2)
    assert abs(float(await dashed.get_attribute("y1")) - expected_y) <= 0.05
    await alice.locator("#jp-main-statusbar").screenshot(path=str(IMG / "lab-sparkline.png"))


async def test_polling_the_state_is_not_the_servers_activity(hub, api, servers):
    """What jupyterhub-singleuser reports to the hub as the server's activity (jupyter-server's
    last_activity) stays as it was; erin's server has no browser open, whose JupyterLab
    would poll kernels and sessions."""
    before = (await server_get(hub, api, "erin", "api/status"))["last_activity"]
    for _ in range(3):
        assert (await server_get(hub, api, "erin", "gpu-reclaim/status"))["available"] is True
    assert (await server_get(hub, api, "erin", "api/status"))["last_activity"] == before
    await api.stop("erin")




async def test_a_hidden_tab_polls_nothing_and_a_shown_one_at_once(hub, api, alice, browser):
    """Every request the proxy passes to the server moves the hub's last_activity: in a tab
    left in the background the extension asks nothing (two minutes on the page's clock), and
    asks at once when the tab is shown again."""
    page = await new_page(browser)
    try:
        await page.add_init_script(COUNT_POLLS)
        await page.clock.install()  # time flows, and the test moves it on as well
        await log_in(page, hub.info["url"], "alice")
        await page.goto(f"{hub.info['url']}/user/alice/lab")
        await expect(page.locator(STATUS)).to_be_visible(timeout=60_000)

        async def polls() -> int:
            return await page.evaluate("window.__gpuReclaimPolls")

        async def reached(n: int) -> bool:
            return await polls() >= n

        before = await polls()
        await page.clock.run_for(25_000)
        await until(lambda: reached(before + 2), 10, "shown: a poll every 10 s")
        await show(page, "hidden")
        hidden = await polls()
        await page.clock.run_for(120_000)
        assert await polls() == hidden
        await show(page, "visible")
        await until(lambda: reached(hidden + 1), 10, "a poll as the tab is shown")
        await page.clock.run_for(10_000)
        await until(lambda: reached(hidden + 2), 10, "the next poll 10 s later")
        assert await polls() == hidden + 2
    finally:
        await page.context.close()


async def test_warning_raises_the_notification_and_keep_alive_clears_it(hub, api, alice, browser):
    await until(lambda: warned(hub, api, "alice"), 60, "alice's GPU session is warned")
    await expect(alice.locator(STATUS)).to_have_text(re.compile(r"stopped at (\d{4}-\d\d-\d\d )?\d\d:\d\d unless used"),
                                                     timeout=30_000)
    # the whole reason (the notification cuts a long one: test_warning_text.py), and what a
    # stop keeps and loses, in the item's hover text (wording.KEEPS, LOSES), its times in the
    # browser's zone as the notification writes them (test_warning_text.py: New York's)
    await expect(alice.locator(STATUS)).to_have_attribute("title", re.compile(
        r"kept alive\. Why: nothing has run on the GPU since (\d{4}-\d\d-\d\d )?\d\d:\d\d\. "
        r"A stop keeps files under your home directory; it loses running processes"))
    toast = alice.locator(".Toastify__toast", has_text=WARNING)
    await expect(toast).to_be_visible(timeout=30_000)
    # why, in the service's words of what was measured (her GPU was never used: not "idle
    # for"), its time in the browser's zone (here UTC: "13:22", not the API's "13:22 UTC (…)")
    since = (await server_get(hub, api, "alice", "gpu-reclaim/status"))["session"]["idle_since"]
    said = f"unless it is used: nothing has run on the GPU since {local_clock(parse_time(since), ZoneInfo('UTC'))}."
    await expect(toast).to_contain_text(said)
    assert len(await toast.locator(".jp-toast-message").text_content()) <= 140  # all JupyterLab shows
    await expect(toast).not_to_contain_text("idle for")
    await expect(toast.get_by_role("button", name="Keep until…")).to_be_visible()
    await expect(toast.get_by_role("button", name="Stop now")).to_be_visible()
    await alice.screenshot(path=str(IMG / "lab-notification.png"), animations="disabled")  # the toast in place
    # once closed, the status bar item (a button while warned) shows it again
    await toast.get_by_title("Hide notification").click()
    await expect(toast).to_have_count(0)
    await expect(alice.locator(STATUS)).to_have_attribute("role", "button")
    await alice.locator(STATUS).click()
    await expect(toast).to_be_visible()
    # the warned text is legible: at least 4.5:1 against the status bar (WCAG 2.1, 1.4.3)
    assert await alice.evaluate(CONTRAST, f"{STATUS} .jp-GpuReclaim-text") >= 4.5
    await toast.get_by_role("button", name="Keep alive 2 h").click()
    await expect(toast).to_have_count(0, timeout=30_000)
    session = await service_session(hub, api, "alice")
    until_ = dt.datetime.fromisoformat(session["intent_until"].replace("Z", "+00:00"))
    assert abs(until_ - dt.datetime.now(UTC) - dt.timedelta(hours=2)) < dt.timedelta(minutes=2)
    assert session["state"] == "kept"
    await expect(alice.locator(STATUS)).to_have_text(re.compile(r"kept alive until (\d{4}-\d\d-\d\d )?\d\d:\d\d"), timeout=30_000)
    await alice.locator("#jp-main-statusbar").screenshot(path=str(IMG / "lab-status-bar.png"))
    await admin_page_shows_the_intent(hub, browser, "alice/", session["intent_until"])


async def admin_page_shows_the_intent(hub, browser, session: str, intent_until: str) -> None:
    """The service's admin page, opened by the hub's admin in the browser: the session's row
    is kept, its state says until when (the kept time), and it offers Clear keep-alive."""
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "admin")
        await page.goto(f"{hub.info['url']}{PREFIX}admin")
        row = page.locator(f'#sessions tr[data-session="{session}"]')
        await expect(row).to_have_class(re.compile(r"\bstate-kept\b"))
        await expect(row.locator(".state-text")).to_contain_text("kept alive until")
        await expect(row.locator(f'.state-text time[datetime="{intent_until}"]')).to_have_count(1)
        await expect(row.get_by_role("button", name="Clear keep-alive")).to_be_visible()
    finally:
        await page.context.close()


async def test_stop_now_stops_the_server_through_the_hub(hub, api, browser, servers):
    page = await open_lab(hub, api, browser, "bob")
    try:
        await until(lambda: warned(hub, api, "bob"), 60, "bob's GPU session is warned")
        toast = page.locator(".Toastify__toast", has_text=WARNING)
        await toast.get_by_role("button", name="Stop now").click(timeout=30_000)
        await until(lambda: _gone(api, "bob"), 60, "bob's server stopped by the hub")
    finally:
        await page.context.close()
    await api.start("dave", GPU)  # on bob's GPU (test_no_status_and_no_notification_...)


async def test_keep_alive_until_a_time_within_the_cap(hub, api, browser, servers):
    """The dialog's time is the browser's (UTC here); beyond the service's max-keepalive (4 h
    in these tests) the service says no and the warning stays; within it, it is kept."""
    page = await open_lab(hub, api, browser, "frank")
    try:
        await until(lambda: warned(hub, api, "frank"), 60, "frank's GPU session is warned")
        toast = page.locator(".Toastify__toast", has_text=WARNING)

        async def keep_until(t: dt.datetime) -> None:
            await toast.get_by_role("button", name="Keep until…").click(timeout=30_000)
            dialog = page.locator(".jp-Dialog")
            await dialog.locator("input[type=time]").fill(t.strftime("%H:%M"))
            await dialog.get_by_role("button", name="Keep alive").click()

        now = dt.datetime.now(UTC).replace(second=0, microsecond=0)
        await keep_until(now + dt.timedelta(hours=6))
        await expect(page.locator(".Toastify__toast", has_text="beyond the cap")).to_be_visible(timeout=30_000)
        assert (await service_session(hub, api, "frank"))["intent_until"] is None
        await expect(toast).to_be_visible()
        target = now + dt.timedelta(hours=1)
        await keep_until(target)
        await expect(toast).to_have_count(0, timeout=30_000)
        session = await service_session(hub, api, "frank")
        assert dt.datetime.fromisoformat(session["intent_until"].replace("Z", "+00:00")) == target
    finally:
        await page.context.close()


async def test_the_first_minute_of_idleness_reads_under_a_minute(hub, api, browser, servers):
    """Not "idle 0 min": the browser's clock is set to 20 s after the service's idle_since,
    then to 5 min after it (the status bar counts from the browser's clock)."""
    page = await open_lab(hub, api, browser, "carol")
    try:
        await until(lambda: warned(hub, api, "carol"), 60, "carol's GPU session is warned")
        idle_since = (await server_get(hub, api, "carol", "gpu-reclaim/status"))["session"]["idle_since"]
        since = dt.datetime.fromisoformat(idle_since.replace("Z", "+00:00"))
        await page.clock.set_fixed_time(since + dt.timedelta(seconds=20))
        await expect(page.locator(STATUS)).to_have_text(re.compile(r"^GPU idle <1 min · stopped at"), timeout=30_000)
        # the notification says why in what was measured, not for how long (issue 39)
        toast = page.locator(".Toastify__toast", has_text=WARNING)
        await expect(toast).to_contain_text(re.compile(r"unless it is used: .+ since \d\d:\d\d"), timeout=30_000)
        await page.locator("#jp-main-statusbar").screenshot(path=str(IMG / "lab-idle-under-a-minute.png"))
        await page.clock.set_fixed_time(since + dt.timedelta(minutes=5, seconds=10))
        await expect(page.locator(STATUS)).to_have_text(re.compile(r"^GPU idle 5 min · stopped at"), timeout=30_000)
    finally:
        await page.context.close()


async def test_the_notification_goes_away_when_the_gpu_is_used_again(hub, api, browser, servers):
    """carol's warned server (the test before) uses its GPU from a kernel: the service clears
    the warning and the notification closes by itself, seen by polling the page."""
    page = await open_lab(hub, api, browser, "carol")
    try:
        assert await warned(hub, api, "carol")
        toast = page.locator(".Toastify__toast", has_text=WARNING)
        await expect(toast).to_be_visible(timeout=30_000)
        await api.run_code("carol", "from gpu_reclaim_sim.gpu import use_gpu; "
                                    "use_gpu(percent=85, seconds=900, block=False)")
        await expect(toast).to_have_count(0, timeout=90_000)  # expect polls the page until then
        assert (await service_session(hub, api, "carol"))["state"] == "active"
        await expect(page.locator(STATUS)).to_have_text(re.compile(r"^GPU \d"), timeout=30_000)
        await expect(page.locator(STATUS)).not_to_contain_text("stopped at")
    finally:
        await page.context.close()
        await api.stop("carol")


async def _gone(api, user: str) -> bool:
    return await api.server(user) is None


async def test_no_status_and_no_notification_where_the_service_is_absent(hub, api, browser):
    if await api.server("dave") is None:  # started as bob freed his GPU, unless run alone
        await api.start("dave", GPU)
    page = await open_lab(hub, api, browser, "dave")
    try:
        assert await server_get(hub, api, "dave", "gpu-reclaim/status") == {"available": False}
        await until(lambda: warned(hub, api, "dave"), 60, "dave's GPU session is warned")
        # the extension's next look at the state, after the warning: it shows nothing
        async with page.expect_response(re.compile(r"/gpu-reclaim/status(\?|$)"), timeout=30_000) as answer:
            pass
        assert await (await answer.value).json() == {"available": False}
        await expect(page.locator(STATUS)).to_be_hidden()
        await expect(page.locator(".Toastify__toast", has_text=WARNING)).to_have_count(0)
    finally:
        await page.context.close()


async def test_a_servers_token_reaches_only_its_own_users_sessions(hub, api):
    """A token with a server's scopes and note, as bob's server has: it reads bob's sessions
    only and changes nothing of alice's; bob cannot use alice's server's endpoints."""
    await api.ensure_user("bob")
    model = await api.request("POST", "/users/bob/tokens", {
        "note": "Server at /user/bob/", "expires_in": 600,
        "scopes": ["users:activity!user=bob", "access:servers!server=bob/",
                   "access:services!service=gpu-reclaim"]})
    c = Client(hub.info["url"], model["token"])
    try:
        status, body = await c.json("GET", "api/sessions")
        assert status == 200 and body["user"] == "bob"
        assert all(s["user"] == "bob" for s in body["sessions"])
        status, _ = await c.json("PUT", "api/sessions/alice//intent", {"hours": 1})
        assert status == 404
        status, _ = await c.json("POST", "api/sessions/alice//stop", {})
        assert status == 404
    finally:
        await c.close()
    assert (await service_session(hub, api, "alice"))["state"] == "kept"  # unchanged
    headers = {"Authorization": f"token {await user_token(api, 'bob')}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.post(f"{hub.info['url']}/user/alice/gpu-reclaim/stop", allow_redirects=False) as r:
            assert r.status in (302, 403), r.status
    assert await api.server("alice") is not None


async def test_bad_keep_alive_input_is_refused_and_changes_nothing(hub, api):
    before = (await service_session(hub, api, "alice"))["intent_until"]
    headers = {"Authorization": f"token {await user_token(api, 'alice')}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        for body in (b"not json", b"[1]", b'{"hours": "soon"}', b'{"hours": 1, "until": "2030-01-01T00:00:00Z"}'):
            async with s.post(f"{hub.info['url']}/user/alice/gpu-reclaim/keep-alive", data=body) as r:
                assert r.status == 400, (body, r.status, await r.text())
                assert (await r.json())["message"], body
    assert (await service_session(hub, api, "alice"))["intent_until"] == before
