"""The way back after a reclaim (issue 38, point 3), end to end: a real JupyterHub with the
service and its pages over GPUReclaimSpawner on the simulated cluster, real single-user
servers (JupyterLab 4) and kernels, and Debian's Chromium.

alice opens two notebooks with a kernel on her GPU server, one named with markup, and leaves
the GPU unused: the service reclaims it. Her reclaim record keeps both with their last
activity; her page lists them (as text: the markup is not markup) and offers Start again,
which goes through the hub's spawn page (her profile form, the `next` kept) and lands in
JupyterLab with the notebook she was last active in open. The hub's home page and the admin
history list them too."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from urllib.parse import quote

import pytest
import pytest_asyncio
from playwright.async_api import expect


from ..support.browser import log_in, new_page
from ..support.hubapi import HubAPI
from ..support.service_hub import reclaimed_and_gone
from ..support.web_client import PREFIX, start_web_hub

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

GPU_PROFILE = "1 × NVIDIA A100 (40 GB)"
HOSTILE = '<img src=x onerror="document.title=1">\u202egnp.ipynb'
LATEST = "work/Modèle 🙂 #1?.ipynb"  # the one she was last active in: reopened
NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
# never-used GPUs warned at 20 s and reclaimed at 30 s: time to open the notebooks first
OPTIONS = {"never_used_warn_after": 20, "never_used_reclaim_after": 30, "idle_warn_after": 20,
           "idle_reclaim_after": 30, "warning_lead": 5}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, **OPTIONS)
    yield child
    child.stop(grace=60)


async def open_notebook(api: HubAPI, user: str, path: str) -> None:
    """The notebook at `path` in the user's home, and a kernel for it (as JupyterLab opens one)."""
    base = f"{api.url}/user/{user}/api"
    if "/" in path:
        async with api.session.put(f"{base}/contents/{quote(path.rsplit('/', 1)[0])}", json={"type": "directory"}) as r:
            assert r.status in (200, 201), await r.text()
    async with api.session.put(f"{base}/contents/{quote(path)}",
                               json={"type": "notebook", "format": "json", "content": NOTEBOOK}) as r:
        assert r.status in (200, 201), await r.text()
    async with api.session.post(f"{base}/sessions", json={"path": path, "name": path.rsplit("/", 1)[-1],
                                                          "type": "notebook", "kernel": {"name": "python3"}}) as r:
        assert r.status == 201, await r.text()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reclaimed(hub):
    """alice's GPU server, two notebooks open in it, reclaimed; yields its reclaim record."""
    async with HubAPI.of(hub) as api:
        await api.start("alice", "gpu-1")
        await api.wait_ready("alice")
        await open_notebook(api, "alice", HOSTILE)
        await asyncio.sleep(1.5)  # a later last activity
        await open_notebook(api, "alice", LATEST)

        yield await reclaimed_and_gone(hub, api, "alice", OPTIONS["never_used_reclaim_after"] + 90)


async def test_the_reclaim_record_keeps_what_was_running(reclaimed):
    assert reclaimed.ran is not None and reclaimed.ran.more == 0
    assert [(r.kind, r.path) for r in reclaimed.ran.ran] == [("notebook", LATEST), ("notebook", HOSTILE)]
    assert all(r.last_activity is not None and r.last_activity <= reclaimed.t for r in reclaimed.ran.ran)


async def test_her_page_lists_it_and_start_again_reopens_the_notebook_in_jupyterlab(hub, reclaimed, browser):
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "alice")
        # the hub's home page says it too, until she has seen it
        await page.goto(f"{hub.info['url']}/hub/home")
        notice = page.frame_locator("#gpu-reclaim-home").locator(f'.reclaimed[data-reclaim="{reclaimed.id}"]')
        await expect(notice.locator(".what-ran bdi.path")).to_have_text([LATEST, HOSTILE])
        await page.goto(f"{hub.info['url']}{PREFIX}")
        row = page.locator(f'table.reclaims tr[data-reclaim="{reclaimed.id}"]')
        await expect(row.locator(".what-ran bdi.path")).to_have_text([LATEST, HOSTILE])
        await expect(row.locator(".what-ran li").first).to_contain_text("last active ")
        await expect(row.locator(".what-ran time")).to_have_count(2)  # in the pages' one clock
        assert await page.locator("table.reclaims img").count() == 0  # the name is text, not markup
        assert await page.title() != "1"

        clicked = time.monotonic()
        await row.get_by_role("link", name="Start again").click()
        await page.wait_for_url(re.compile(r"/hub/spawn/alice\?next="))
        await page.get_by_label(GPU_PROFILE).check()
        await page.get_by_role("button", name="Start").click()
        # the hub sends her on to `next` once the server is up: the lab, the notebook open
        await page.wait_for_url(re.compile(r"/user/alice/lab/tree/work/"), timeout=180_000)
        tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=LATEST.rsplit("/", 1)[1])
        await expect(tab).to_be_visible(timeout=60_000)
        await expect(page.locator(".jp-NotebookPanel:visible")).to_have_count(1)
        print(f"\nStart again to the notebook open in JupyterLab, the profile form and the spawn included: "
              f"{time.monotonic() - clicked:.1f} s; at {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    finally:
        await page.context.close()


async def test_the_admin_history_shows_it(hub, reclaimed, browser):
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "admin")
        await page.goto(f"{hub.info['url']}{PREFIX}admin")
        row = page.locator(f'#reclaims tr[data-reclaim="{reclaimed.id}"]')
        await expect(row.locator(".what-ran bdi.path")).to_have_text([LATEST, HOSTILE])
        assert await page.locator("#reclaims img").count() == 0
    finally:
        await page.context.close()
