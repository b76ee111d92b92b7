"""GPUReclaimSpawner on the simulated cluster with a real hub: spawn timings (with and
without an image pull), the "waiting for a free GPU" line and the GPU queue timeout, the
keep-alive control of the real spawn form and of a spawn link, and image-locality affinity."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest
from playwright.async_api import expect
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.browser import IMG, log_in, low_contrast, new_page
from ..support.live import hub_fixture, api_fixture
from ..support.hubapi import HubAPI

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
UTC = dt.timezone.utc
PASSWORD = "test-password"


hub = hub_fixture(HERE / "jupyterhub_config_spawner.py")


api = api_fixture("module")


def kubectl_json(sim, *args: str) -> dict:
    kubectl = Path(sys.executable).with_name("kubectl")
    out = subprocess.run([str(kubectl), "--kubeconfig", sim.info["kubeconfig"], "-n", "jhub", *args, "-o", "json"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)


def hub_metrics(hub) -> dict:
    with urllib.request.urlopen(f"{hub.info['url']}/hub/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def hub_log(hub) -> str:
    return hub.log_path.read_text(errors="replace")


async def test_timings_of_a_spawn_that_pulls(hub, sim, api):
    await api.start("alice", "gpu-1")  # the 5 GB PyTorch image is on no GPU node yet: pulled at 2 GB/s
    await api.wait_ready("alice")
    pod = kubectl_json(sim, "get", "pod", "jupyter-alice")
    timings = json.loads(pod["metadata"]["annotations"]["jupyterhub-gpu-reclaim/spawn-timings"])
    phases = timings["phases"]
    assert timings["image_pulled"] is True and timings["image_size"] == 5_000_000_000, timings
    assert 1.0 < phases["pull"] < 10
    assert phases["pull"] <= phases["total"] < 120
    # from the objects' own times: the pod's creation, its conditions, the kubelet's events
    assert parse_time(timings["created"]) <= parse_time(timings["scheduled"]) <= parse_time(timings["ready"])
    line, = [json.loads(m) for m in re.findall(r"spawn timings (\{.*\})", hub_log(hub))]
    assert line["user"] == "alice" and line["profile"] == "gpu-1" and line["pull_s"] == phases["pull"]
    values = hub_metrics(hub)
    assert values[("jupyterhub_gpu_reclaim_spawn_phase_duration_seconds_count",
                   (("phase", "pull"), ("profile", "gpu-1")))] == 1
    assert values[("jupyterhub_gpu_reclaim_spawn_image_pulls_total", (("profile", "gpu-1"),))] == 1
    assert any(name == "jupyterhub_server_spawn_duration_seconds_count" for name, _ in values)  # the same registry
    # the profile is KubeSpawner's option, applied at the start: not "unhandled" (issue 39)
    assert "unhandled user_options" not in hub_log(hub)


async def test_image_locality_requires_the_node_that_holds_the_image(hub, sim, api):
    """alice's spawn pulled the GPU image onto one node; carol's GPU pod is sent there."""
    alice_node = kubectl_json(sim, "get", "pod", "jupyter-alice")["spec"]["nodeName"]
    await api.start("carol", "gpu-1")
    await api.wait_ready("carol")
    pod = kubectl_json(sim, "get", "pod", "jupyter-carol")
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all({"key": "metadata.name", "operator": "In", "values": [alice_node]} in t.get("matchFields", [])
               for t in terms)
    assert pod["spec"]["nodeName"] == alice_node
    timings = json.loads(pod["metadata"]["annotations"]["jupyterhub-gpu-reclaim/spawn-timings"])
    assert timings["image_pulled"] is False and timings["phases"]["pull"] == 0  # "already present"
    assert re.search(r"image locality for carol.*require", hub_log(hub))


async def test_gpu_wait_is_said_plainly_then_the_queue_timeout_withdraws_it(hub, sim, api):
    await api.start("dave", "gpu-2")  # 1 + 1 + 2: the cluster's four GPUs are taken
    await api.wait_ready("dave")
    await api.start("erin", "gpu-1")
    events = await api.progress("erin", timeout=90)
    texts = [e.get("message", "") for e in events]
    waiting = [t for t in texts if t.startswith("Waiting for a free GPU")]
    assert waiting, texts
    assert re.match(r"Waiting for a free GPU \(1 GPU requested, no requests ahead of you, waiting \d+ s\)", waiting[0])
    final = events[-1]
    assert final.get("failed") and "No GPU became free" in final["message"]
    assert not any("Insufficient nvidia.com/gpu" in t for t in texts)  # the raw scheduler line is replaced
    assert (await api.server("erin")) is None
    pods = [p["metadata"]["name"] for p in kubectl_json(sim, "get", "pods")["items"]]
    assert "jupyter-dave" in pods and "jupyter-erin" not in pods  # withdrawn: no pod left waiting


async def test_the_form_says_what_is_free_and_a_waiting_user_is_offered_what_fits_now(hub, sim, api, browser):
    """carol's GPU given back (alice and dave hold 3 of the 4): in Chromium, gina's spawn form
    says so above the profiles, and beside each GPU profile whether it starts now, legible in
    the hub's light and dark themes; she starts the 2-GPU profile and her spawn page offers the
    1-GPU one, which would start at once, with the hub's home page (its Stop My Server) linked;
    another user's form shows her in the queue (issue 39)."""
    await api.stop("carol")
    assert "jupyter-carol" not in [p["metadata"]["name"] for p in kubectl_json(sim, "get", "pods")["items"]]
    for user in ("gina", "ivan"):
        await api.ensure_user(user)
    page, ivan = await new_page(browser), await _login(hub, "ivan")
    try:
        await log_in(page, hub.info["url"], "gina")
        await expect(page.locator("p.gpu-room")).to_have_text("Free now: 1 of 4 GPUs. Waiting for a GPU: no one.")
        # beside each GPU profile, whether it starts now, after the admin's description
        profile = page.locator("label.js-profile-label")
        await expect(profile.filter(has_text="1 × NVIDIA A100").locator(".gpu-fit")).to_have_text(
            "Starts now: 1 of 4 GPUs free.")
        await expect(profile.filter(has_text="2 × NVIDIA A100").locator(".gpu-fit")).to_have_text(
            "Waits for a GPU: 1 of 4 GPUs free.")
        await expect(profile.filter(has_text="2 × NVIDIA A100")).to_contain_text("For multi-GPU training.")
        await expect(profile.filter(has_text="CPU").locator(".gpu-fit")).to_have_count(0)
        await page.locator("#kubespawner-profiles-list").screenshot(path=str(IMG / "spawn-form-gpus.png"))
        # ours legible in the hub's light and dark themes (its darkmode.js follows
        # prefers-color-scheme); the hub's own Start button is the hub's
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await expect(page.locator("html")).to_have_attribute("data-bs-theme", scheme)
            for ours in ("p.gpu-room", "#kubespawner-profiles-list"):
                assert await low_contrast(page.locator(ours)) == [], (scheme, ours)
        await page.get_by_label("2 × NVIDIA A100 (40 GB)").check()
        await page.get_by_role("button", name="Start").click()
        progress = asyncio.create_task(api.progress("gina", timeout=90))
        message = page.locator("#progress-message")
        await expect(message).to_contain_text("would start at once", timeout=30_000)
        await expect(message.get_by_role("link", name="the hub's home page")).to_have_attribute("href", "/hub/home")
        await page.screenshot(path=str(IMG / "spawn-offer.png"))
        while not progress.done():  # ivan's form, once gina's pod waits (until it is withdrawn)
            form, _ = await _spawn_form(ivan, hub, "ivan")
            if "Waiting for a GPU: 1 request (2 GPUs)." in form:
                break
            await asyncio.sleep(0.5)
        assert "Free now: 1 of 4 GPUs. Waiting for a GPU: 1 request (2 GPUs)." in form, form
        events = await progress
    finally:
        await page.context.close()
        await ivan.close()
    offer = ("1 GPU is free now: “1 × NVIDIA A100 (40 GB)” would start at once. To take it, stop this "
             "request on {} (Stop My Server) and start that profile.")
    offered = [e for e in events if e.get("message", "").startswith("Waiting for a free GPU (2 GPUs requested")
               and e["message"].endswith(offer.format("the hub's home page"))]
    assert offered, events
    assert offered[-1]["html_message"].endswith(offer.format('<a href="/hub/home">the hub\'s home page</a>'))
    assert "No GPU became free" in events[-1]["message"]  # the queue timeout still applies


async def _login(hub, user: str) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(f"{hub.info['url']}/hub/login") as r:
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', await r.text()).group(1)
    async with session.post(f"{hub.info['url']}/hub/login?next=",
                            data={"username": user, "password": PASSWORD, "_xsrf": xsrf}) as r:
        assert r.status == 200, await r.text()
    return session


async def _spawn_form(session, hub, user) -> tuple[str, str]:
    async with session.get(f"{hub.info['url']}/hub/spawn/{user}") as r:
        page = await r.text()
        assert r.status == 200, page
    return page, re.search(r'xsrf_token: "([^"]+)"', page).group(1)  # what the page's script sends


async def test_keepalive_from_the_spawn_form_reaches_the_pod(hub, sim, api):
    await api.ensure_user("frank")
    session = await _login(hub, "frank")
    try:
        page, xsrf = await _spawn_form(session, hub, "frank")
        assert "Keep this session until" in page and 'value="4h"' in page
        # a time in the past: the form again, with the reason; nothing started
        past = (dt.datetime.now(UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        async with session.post(f"{hub.info['url']}/hub/spawn/frank",
                                data={"_xsrf": xsrf, "profile": "cpu", "keepalive": "until",
                                      "keepalive_until": past, "keepalive_tz_offset": "0"}) as r:
            text = await r.text()
        assert r.status == 400 and "is in the past" in text and "Keep this session until" in text
        assert await api.server("frank") is None
        # 4 hours: the annotation on the pod
        before = dt.datetime.now(UTC)
        async with session.post(f"{hub.info['url']}/hub/spawn/frank",
                                data={"_xsrf": xsrf, "profile": "cpu", "keepalive": "4h"}) as r:
            assert r.status == 200, await r.text()
        await api.wait_ready("frank")
    finally:
        await session.close()
    await _assert_kept_for(sim, api, "frank", dt.timedelta(hours=4), since=before)


async def _assert_kept_for(sim, api, user: str, duration: dt.timedelta, since: dt.datetime) -> None:
    """The user's pod carries a keep-alive `duration` after `since` (within a minute), and the
    server's user_options the same time with the cpu profile."""
    pod = kubectl_json(sim, "get", "pod", f"jupyter-{user}")
    until = parse_time(pod["metadata"]["annotations"]["jupyterhub-gpu-reclaim/keepalive-until"])
    assert duration - dt.timedelta(minutes=1) <= until - since <= duration + dt.timedelta(minutes=1)
    options = (await api.user(user))["servers"][""]["user_options"]
    assert options["profile"] == "cpu" and parse_time(options["keepalive_until"]) == until


LINK_REFUSED = "A link cannot keep a session alive"


@pytest.mark.hub_contract
async def test_a_spawn_link_never_keeps_a_server_alive(hub, sim, api):
    """Issue 27, finding 4, attacked as found: anyone can send grace
    `/hub/spawn/grace?opt-keepalive=4h` (on JupyterHub 5 too, which passes the query as it is
    to the spawner). A link with a keep-alive, new style or old, shows the form with the reason
    and starts nothing; a link without one starts the server, with no keep-alive; the form
    then sets one, as a person chose it."""
    await api.ensure_user("grace")
    session = await _login(hub, "grace")
    try:
        for query in ("opt-profile=cpu&opt-keepalive=4h", "opt-keepalive=until&opt-keepalive_until=2030-01-01T00:00",
                      "opt-profile=cpu&opt-keepalive_until=2030-01-01T00:00:00Z", "profile=cpu&keepalive=4h"):
            async with session.get(f"{hub.info['url']}/hub/spawn/grace?{query}") as r:
                text = await r.text()
            assert r.status == 400 and LINK_REFUSED in text and "Keep this session until" in text, query
            assert await api.server("grace") is None
        async with session.get(f"{hub.info['url']}/hub/spawn/grace?opt-profile=cpu&opt-keepalive=") as r:
            assert r.status == 200, await r.text()
        await api.wait_ready("grace")
        pod = kubectl_json(sim, "get", "pod", "jupyter-grace")
        assert "jupyterhub-gpu-reclaim/keepalive-until" not in (pod["metadata"].get("annotations") or {})
        options = (await api.server("grace"))["user_options"]
        assert options["profile"] == "cpu" and "keepalive_until" not in options, options
        await api.stop("grace")
        _, xsrf = await _spawn_form(session, hub, "grace")
        before = dt.datetime.now(UTC)
        async with session.post(f"{hub.info['url']}/hub/spawn/grace",
                                data={"_xsrf": xsrf, "profile": "cpu", "keepalive": "2h"}) as r:
            assert r.status == 200, await r.text()
        await api.wait_ready("grace")
    finally:
        await session.close()
    await _assert_kept_for(sim, api, "grace", dt.timedelta(hours=2), since=before)


# what a hostile user sends as "keep until" (the form's field, a spawn link's opt- query
# option, the REST API's user_options) and the reason the form shows for each
ABSURD_FORMS = [
    ({"keepalive": "until", "keepalive_until": "9999-12-31T23:59:59-23:59"}, "at most 12 hours from now"),
    ({"keepalive": "until", "keepalive_until": "0001-01-01T00:00:00+23:59"}, "is in the past"),
    ({"keepalive": "until", "keepalive_until": "275760-09-13T00:00"}, "is not a date and time"),
    ({"keepalive": "until", "keepalive_until": "2030-01-01T00:00", "keepalive_tz_offset": "NaN"}, "time zone"),
    ({"keepalive": "99999999999999h"}, "is not a duration"),
    ({"keepalive": "1e308"}, "is not a duration"),
]
ABSURD_OPTIONS = [
    ('{"profile": "cpu", "keepalive_until": "9999-12-31T23:59:59-23:59"}', "at most 12 hours from now"),
    ('{"profile": "cpu", "keepalive_until": NaN}', "not float"),
    ('{"profile": "cpu", "keepalive_until": 1e999}', "not float"),
    ('{"profile": "cpu", "keepalive_until": ["2030-01-01T00:00:00Z"]}', "not list"),
    ('{"profile": "cpu", "keepalive_until": "soon"}', "must be an ISO 8601 time"),
]


async def test_absurd_keepalive_values_are_refused_and_start_nothing(hub, sim, api):
    """9999-12-31T23:59:59-23:59 and its kin, from the form, a spawn link and the REST API:
    the reason (400 with the form again, or the spawn's failure event), no server, no pod,
    and no unhandled error in the hub."""
    user = "mallory"
    await api.ensure_user(user)
    session = await _login(hub, user)
    try:
        _, xsrf = await _spawn_form(session, hub, user)
        for form, message in ABSURD_FORMS:
            async with session.post(f"{hub.info['url']}/hub/spawn/{user}",
                                    data={"_xsrf": xsrf, "profile": "cpu", **form}) as r:
                text = await r.text()
            assert r.status == 400 and message in text and "Keep this session until" in text, (form, text[-2000:])
            assert await api.server(user) is None
            # the same values in a spawn link (opt- query options): no link sets a keep-alive
            query = urlencode({"opt-profile": "cpu", **{f"opt-{k}": v for k, v in form.items()}})
            async with session.get(f"{hub.info['url']}/hub/spawn/{user}?{query}") as r:
                text = await r.text()
            assert r.status == 400 and LINK_REFUSED in text and "Keep this session until" in text, (query, text[-2000:])
            assert await api.server(user) is None
    finally:
        await session.close()
    for body, message in ABSURD_OPTIONS:  # any JSON, as the REST API takes it
        async with api.session.post(f"{api.api}/users/{user}/server", data=body,
                                    headers={"Content-Type": "application/json"}) as r:
            answer = await r.text()
        # the tests' hub answers before the spawn ends (slow_spawn_timeout 0); a hub that waits
        # answers 400 with the reason
        assert r.status in (201, 202, 400), answer
        await until_gone(api, user)
        if r.status != 400:  # the spawn failed: the reason is what the spawn page shows
            event, = await api.progress(user, timeout=30)
            assert event.get("failed"), event
            answer = event["message"]
        assert message in answer, (body, answer)
    pods = [p["metadata"]["name"] for p in kubectl_json(sim, "get", "pods")["items"]]
    assert f"jupyter-{user}" not in pods
    log = hub_log(hub)
    log = log[log.index(f"User logged in: {user}"):]
    assert f"Unhandled error starting {user}'s server" not in log
    # the hub logs each refusal of the form with its traceback: every one is the clear refusal
    raised = set(re.findall(r"^    ([\w.]+(?:Error|Exception)): ", log, re.M))
    assert raised == {"jupyterhub_gpu_reclaim.spawner.keepalive.KeepaliveError"}, raised


async def until_gone(api: HubAPI, user: str, timeout: float = 30) -> None:
    """The user's failed spawn is cleaned up (JupyterHub stops it after the failure)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while await api.server(user) is not None:
        assert asyncio.get_running_loop().time() < deadline, await api.server(user)
        await asyncio.sleep(0.3)


PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "One GPU", "slug": "gpu-1", "profile_options": {"image": {
        "display_name": "Environment",
        "choices": {"torch": {"display_name": "PyTorch", "kubespawner_override": {"image": "torch:1"}},
                    "tf": {"display_name": "TensorFlow", "kubespawner_override": {"image": "tf:1"}}}}}},
]


async def _profiles_coroutine(spawner):
    return PROFILES


@pytest.mark.parametrize("profile_list", [PROFILES, lambda spawner: PROFILES, _profiles_coroutine],
                         ids=["list", "callable", "coroutine"])
async def test_keepalive_joins_every_form_of_profile_list(kubeconfig, profile_list):
    """The keep-alive control follows KubeSpawner's profile form whether profile_list is a
    list or a function (plain or async), and the options keep the profile and its choices."""
    from traitlets.config import Config

    from jupyterhub_gpu_reclaim.spawner.core import GPUReclaimSpawner

    class User:
        name = escaped_name = "ivan"
        id = 9
        url = "/user/ivan/"
        spawners: dict = {}

    config = Config()
    config.GPUReclaimSpawner.profile_list = profile_list
    spawner = GPUReclaimSpawner(_mock=True, user=User(), config=config)
    page = await spawner.get_options_form()
    assert page.index("One GPU") < page.index("TensorFlow") < page.index("Keep this session until")
    before = dt.datetime.now(UTC)
    options = spawner.run_options_from_form(
        {"profile": ["gpu-1"], "profile-option-gpu-1--image": ["tf"], "keepalive": ["2h"]})
    assert options["profile"] == "gpu-1" and options["image"] == "tf"
    assert dt.timedelta(hours=2) - dt.timedelta(seconds=5) <= parse_time(options["keepalive_until"]) - before <= dt.timedelta(hours=2, seconds=5)
