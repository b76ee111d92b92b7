"""The warning's notification in JupyterLab never says more than JupyterLab shows of a message
(140 characters: it cuts the rest), whatever the reason; a reason too long for it is cut at a
word, with "…", and the status bar item's hover text has it whole, its times as the
notification and the item write them: in the browser's zone (one clock; issue 39).

Every form of the reason the service gives (service/reasons.py `why`, as its API writes a
session: web/render.py `session_json`), each at its longest (times on another day, a long
window, many GPUs), a warning without a reason and an older service's `why` alone, is given in
turn to a real jupyter-server with the extension (tests/support/lab_server.py), wired to a
stand-in for the service's `api/sessions`, and read in Chromium in New York's time zone."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from aiohttp import web
from playwright.async_api import expect

from jupyterhub_gpu_reclaim.durations import format_duration
from jupyterhub_gpu_reclaim.policy.evidence import Measured
from jupyterhub_gpu_reclaim.service.reasons import SAID
from jupyterhub_gpu_reclaim.service.status import SessionStatus
from jupyterhub_gpu_reclaim.timestamps import jsonable, parse_time
from jupyterhub_gpu_reclaim.web.render import session_json
from jupyterhub_gpu_reclaim.wording import KEEPS, LOSES

from ..support.browser import local_clock, new_page, show
from ..support.fakes import serve
from ..support.lab_page import STATUS
from ..support.lab_server import Server
from ..support.service_hub import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

MAX_MESSAGE = 140  # labextension/src/warning.ts: what JupyterLab shows of a notification's message
ZONE = ZoneInfo("America/New_York")
NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
DAYS_AGO = NOW - dt.timedelta(days=2, hours=3, minutes=17)  # written with its date
MIN = dt.timedelta(minutes=1)


def warned(rule: str, measured: Measured | None = None, idle_since: dt.datetime | None = DAYS_AGO,
           reclaim_at: dt.datetime = NOW + 3 * MIN, gpus: int = 1) -> dict:
    """A warned session as the service's API gives it."""
    info = SessionStatus(session="alice/", user="alice", server="", gpus=gpus, util_now=[0.0] * gpus,
                         spark=[0.0] * 60, idle_threshold=1.0, rule=rule, action="warn", measured=measured or Measured(),
                         idle_since=idle_since, warned_at=NOW - MIN, reclaim_at=reclaim_at)
    return jsonable(session_json(info, NOW))


# each rule the service has words for, at its longest, and a few at their shortest
FORMS = {
    "never used": warned("gpu-never-used"),
    "never used, since the start": warned("gpu-never-used", idle_since=None),
    "never used, a cell ran": warned("gpu-never-used", Measured(last_busy_kernel=DAYS_AGO + MIN)),
    "idle, one GPU": warned("gpu-idle", Measured(window=dt.timedelta(minutes=30), window_max_util=(0.4,))),
    "idle, 16 GPUs, a long window": warned(
        "gpu-idle", Measured(window=dt.timedelta(hours=23, minutes=59), window_max_util=(0.95,) * 16), gpus=16),
    "idle, stopped tomorrow": warned("gpu-idle", Measured(window=dt.timedelta(hours=1), window_max_util=(0.5,)),
                                     reclaim_at=NOW + dt.timedelta(days=1, hours=1)),
    "shared": warned("shared-gpu-idle-kernels", Measured(gpu_shared=True)),
    "CPU work": warned("cpu-work-on-gpu", Measured(cpu_work_since=DAYS_AGO)),
    "CPU work, stopped tomorrow": warned("cpu-work-on-gpu", Measured(cpu_work_since=DAYS_AGO),
                                         reclaim_at=NOW + dt.timedelta(days=1, hours=1)),
    "job ended": warned("job-ended-unattended", Measured(last_seen=DAYS_AGO + MIN)),
    "keep-alive ended": warned("intent-ended", Measured(intent_end=DAYS_AGO + MIN)),
    "longest time": warned("max-age", Measured(max_age_at=NOW + dt.timedelta(days=1, hours=1))),
    "admin": warned("admin"),
    "no activity since": warned("idle-culler-timeout", Measured(hub_last_activity=DAYS_AGO)),
    "no activity for": warned("idle-culler-timeout", Measured(inactive=dt.timedelta(days=3, hours=23))),
    "no activity": warned("idle-culler-timeout"),
    "culler's longest time": warned("idle-culler-max-age"),
    "no reason": warned("a-rule-without-words"),
    # an older service: its sentence alone, its times in UTC (a long one: the server passes up to
    # stopped.MAX_TEXT characters)
    "an older service": {**warned("gpu-idle"), "why_parts": None,
                         "why": "; ".join(["the GPU has not been used since 2026-12-05 13:22 UTC (2 d ago)"] * 10)},
}


def session(**kw) -> dict:
    """alice's session in another state, as the service's API gives it."""
    info = SessionStatus(session="alice/", user="alice", server="", gpus=1, util_now=[0.0], spark=[0.0] * 60,
                         idle_threshold=1.0, action="keep", **kw)
    return jsonable(session_json(info, NOW))


# the other states whose status bar item says a time (index.ts `describe`), and its hover text
TIMED = {
    "kept": (session(rule="gpu-idle", intent_until=NOW + dt.timedelta(hours=2), intent_set_at=NOW),
             "Kept alive until {}", "intent_until"),
    "exempt": (session(rule="exempt", exempt_until=NOW + dt.timedelta(days=1, hours=1), exempt_by="root"),
               "Exempt from reclaim until {}", "exempt_until"),
    "idle": (session(rule="gpu-idle", idle_since=DAYS_AGO), "GPU not used since {}", "idle_since"),
}


# a running session's item (index.ts `describe`): its hover text names its GPUs as the
# service's pages do (web/render.py `session_json`, "gpus_text")
RUNNING = {
    "a MIG slice": (session(rule="gpu-active", gpu_kinds=(("mig", 1),)), "GPU utilization now (1 MIG slice)"),
    "a shared GPU": (session(rule="gpu-active", gpu_kinds=(("shared", 1),)), "GPU utilization now (1 shared GPU)"),
    "a GPU": (session(rule="gpu-active"), "GPU utilization now (1 GPU)"),
    "a GPU, an older service": ({k: v for k, v in session(rule="gpu-active").items() if k != "gpus_text"},
                                "GPU utilization now (1 GPU)"),
    # what a service answers is passed on as text or not at all: a number is no words
    "a GPU, words that are not text": ({**session(rule="gpu-active"), "gpus_text": {"<b>": 1}},
                                       "GPU utilization now (1 GPU)"),
}


async def test_the_forms_are_every_reason_the_service_words():
    assert {f["rule"] for f in FORMS.values()} >= SAID


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service():
    """A stand-in for the service's `api/sessions` as the server's token sees it: alice's
    session, its form `shown["form"]`."""
    shown = {"form": "never used"}

    async def sessions(_: web.Request) -> web.Response:
        name = shown["form"]
        form = FORMS[name] if name in FORMS else TIMED[name][0] if name in TIMED else RUNNING[name][0]
        return web.json_response({"user": "alice", "sessions": [form], "keeps": KEEPS,
                                  "loses": LOSES, "max_keepalive_seconds": 14400, "reclaims": []})

    app = web.Application()
    app.router.add_get("/api/sessions", sessions)
    runner, url = await serve(app)
    yield url, shown
    await runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lab(service, browser, tmp_path_factory):
    url, _ = service
    home = tmp_path_factory.mktemp("home")
    server = Server(home, None, (f"--GpuReclaimLab.service_url={url}/",),
                    env={"JUPYTERHUB_API_TOKEN": "a-token", "JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": ""})
    page = None
    try:
        await server.ready()
        page = await new_page(browser, "America/New_York")
        await page.goto(f"http://127.0.0.1:{server.port}/lab?token={server.token}")
        await expect(page.locator(STATUS)).to_be_visible(timeout=60_000)
        yield page
    finally:
        if page is not None:
            await page.context.close()
        await server.close()


def in_words(session: dict) -> str:
    """The reason as the tab writes it, in the notification and on hover alike: each time in
    the browser's zone; an older service's sentence as it is (its times in UTC)."""
    parts = session["why_parts"]
    if not parts:
        return session["why"] or ""
    return "".join(local_clock(parse_time(p["time"]), ZONE) if "time" in p else p["text"] for p in parts)


def on_hover(t: str) -> str:
    """A time as the status bar item's hover text writes it (index.ts): in the browser's zone as
    the item and the notification write it, then in UTC: "08:33 (2026-12-05 13:33 UTC)"."""
    return f"{local_clock(parse_time(t), ZONE)} ({parse_time(t).strftime('%Y-%m-%d %H:%M UTC')})"


@pytest.mark.parametrize("form", FORMS)
async def test_the_notification_fits_and_the_hover_text_has_the_whole_reason(lab, service, form):
    _, shown = service
    shown["form"] = form
    session = FORMS[form]
    why = in_words(session)
    at = local_clock(parse_time(session["reclaim_at"]), ZONE)
    # the tab asks again at once when it is shown again (index.ts)
    await show(lab, "hidden")
    await show(lab, "visible")
    # this warning's toast (one of another time is raised anew: the one before fades out)
    message = lab.locator(".Toastify__toast", has_text=f"stopped at {at} unless it is used").locator(".jp-toast-message")
    if not why:  # an idleness, not a reason: always whole
        idle = (rf"Your GPU has been idle for {format_duration(dt.datetime.now(dt.timezone.utc) - DAYS_AGO)}: "
                rf"this server is stopped at {at} unless it is used\.")
        said = await until(lambda: _said(message, lambda text: re.fullmatch(idle, text)), 30, f"the {form!r} warning")
    else:
        whole = f"Your GPU server is stopped at {at} unless it is used: {why}."
        said = await until(lambda: _said(message, lambda text: text == whole or (
            text.endswith("…") and whole.startswith(text[:-1]))), 30, f"the {form!r} warning")
        # cut at a word, with "…", only what would not fit, and no more than a word's worth
        assert said == whole or (len(whole) > MAX_MESSAGE and len(said) > MAX_MESSAGE - 20), said
    assert len(said) <= MAX_MESSAGE, said
    # the whole reason on hover, its times as the notification writes them (one clock), the
    # stop's in UTC as well
    hover = f"The server is stopped at {on_hover(session['reclaim_at'])} unless its GPU is used or it is kept alive."
    hover += f" Why: {why}." if why else ""
    await expect(lab.locator(STATUS)).to_have_attribute("title", f"{hover} A stop keeps {KEEPS}; it loses {LOSES}.")


async def _said(message, says) -> str | None:
    """The notification's message once `says` it is this warning's (the toast of the warning
    before may still be fading out)."""
    return next((text for text in await message.all_text_contents() if says(text)), None)


@pytest.mark.parametrize("state", TIMED)
async def test_the_hover_text_of_each_state_says_its_time_as_the_item_does(lab, service, state):
    """One clock: the item's text and its hover text say the time alike, in the browser's
    zone, the hover text in UTC as well."""
    _, shown = service
    shown["form"] = state
    form, words, key = TIMED[state]
    await show(lab, "hidden")
    await show(lab, "visible")
    item = lab.locator(STATUS)
    await expect(item).to_have_attribute("title", words.format(on_hover(form[key])))
    if state != "idle":
        await expect(item).to_contain_text(local_clock(parse_time(form[key]), ZONE))
    else:  # for how long, as the service's pages write a duration
        await expect(item.locator(".jp-GpuReclaim-text")).to_have_text(
            f"GPU idle {format_duration(dt.datetime.now(dt.timezone.utc) - DAYS_AGO)}")


@pytest.mark.parametrize("kind", RUNNING)
async def test_a_running_sessions_item_names_its_gpus_as_the_pages_do(lab, service, kind):
    """A MIG slice or a shared GPU by its name, as the user page's card and the spawn page
    name it; a whole GPU as before (and from an older service, which gives no words)."""
    _, shown = service
    shown["form"] = kind
    form, title = RUNNING[kind]
    await show(lab, "hidden")
    await show(lab, "visible")
    item = lab.locator(STATUS)
    await expect(item).to_have_attribute("title", title)
    await expect(item.locator(".jp-GpuReclaim-text")).to_have_text(f"GPU {form['util_text']}")
