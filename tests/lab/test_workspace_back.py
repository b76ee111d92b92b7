"""The workspace comes back after a reclaim (issue 38, "Start again reopens the workspace"), end
to end: a real JupyterHub with the service and its pages over GPUReclaimSpawner on the
simulated cluster, real single-user servers (JupyterLab 4) and Debian's Chromium.

alice opens two notebooks as tabs in JupyterLab, which saves its workspace (the open documents
and their layout) under her home, `~/.jupyter/lab/workspaces`, keeping her server alive while
she does (so that on a loaded machine too the reclaim comes after both are open and their
kernels listed); she clears the keep-alive and her unused GPU is reclaimed. Her home outlives the pod, so *Start again* (the spawn page, then `lab/tree/<the notebook she
was last active in>`) lands in JupyterLab with both tabs open: the `tree` URL adds its document
to the saved workspace, it does not reset it."""

from __future__ import annotations

import json
import re

import pytest
import pytest_asyncio
from playwright.async_api import expect


from ..support.browser import log_in, new_page
from ..support.hubapi import HubAPI
from ..support.service_hub import reclaimed_and_gone, until
from ..support.sim_cluster import home
from ..support.web_client import PREFIX, Client, start_web_hub, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

GPU_PROFILE = "1 × NVIDIA A100 (40 GB)"
FIRST, LATEST = "first.ipynb", "second.ipynb"  # LATEST: the one she was last active in
NOTEBOOK = {"cells": [], "nbformat": 4, "nbformat_minor": 5,  # its kernel named: no kernel dialog
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
# never-used timings long past when she clears her keep-alive: warned at once, reclaimed 5 s later
OPTIONS = {"never_used_warn_after": 40, "never_used_reclaim_after": 50, "idle_warn_after": 40,
           "idle_reclaim_after": 50, "warning_lead": 5}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, **OPTIONS)
    yield child
    child.stop(grace=60)


def tab(page, name: str):
    return page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name)


def saved_documents(sim) -> set[str]:
    """The documents open in alice's saved JupyterLab workspaces (files in her home)."""
    found: set[str] = set()
    for f in (home(sim, "alice") / ".jupyter" / "lab" / "workspaces").glob("*.jupyterlab-workspace"):
        data = json.loads(f.read_text()).get("data", {})
        found |= {v["data"]["path"] for k, v in data.items() if k.startswith("notebook:")}
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reclaimed(hub, sim, browser):
    """alice's GPU server, two notebooks open as JupyterLab tabs (the workspace saved by
    JupyterLab in her home), reclaimed; yields its reclaim record."""
    async with HubAPI.of(hub) as api:
        await api.start("alice", "gpu-1")
        await api.wait_ready("alice")
        alice = Client(hub.info["url"], await user_token(api, "alice"))
        intent = "api/sessions/alice//intent"
        # kept alive from the service's first sight of her server (404 before it)
        await until(lambda: _kept(alice, intent), 60, "alice's keep-alive taken")
        for path in (FIRST, LATEST):
            async with api.session.put(f"{api.url}/user/alice/api/contents/{path}",
                                       json={"type": "notebook", "format": "json", "content": NOTEBOOK}) as r:
                assert r.status in (200, 201), await r.text()
        page = await new_page(browser)
        try:
            await log_in(page, hub.info["url"], "alice")
            await page.goto(f"{hub.info['url']}/user/alice/lab/tree/{FIRST}")
            await expect(tab(page, FIRST)).to_be_visible(timeout=60_000)
            # the second opened from the file browser, as she would
            await page.locator(".jp-DirListing-item", has_text=LATEST).dblclick()
            await expect(tab(page, LATEST)).to_be_visible(timeout=60_000)
            await expect(tab(page, FIRST)).to_be_visible()
            await until(lambda: saved_documents(sim) >= {FIRST, LATEST}, 30, "alice's workspace saved in her home")
            await until(lambda: _has_both(api), 60, "both notebooks' kernels listed on her server")
        finally:
            await page.context.close()
        status, body = await alice.json("DELETE", intent)
        await alice.close()
        assert status == 200 and body["cleared"], (status, body)
        # past the never-used timings: warned at once, reclaimed the warning's lead later
        yield await reclaimed_and_gone(hub, api, "alice", 90)


async def _kept(alice: Client, intent: str) -> bool:
    status, _ = await alice.json("PUT", intent, {"duration": "1h"})
    return status == 200


async def _has_both(api) -> bool:
    """Both notebooks have a kernel session on alice's server (what its probe reads)."""
    async with api.session.get(f"{api.url}/user/alice/api/sessions") as r:
        return r.status == 200 and {s["path"] for s in await r.json()} >= {FIRST, LATEST}


async def test_start_again_reopens_both_tabs(hub, sim, reclaimed, browser):
    assert saved_documents(sim) >= {FIRST, LATEST}  # the workspace outlived the pod, in her home
    ran = {r.path for r in reclaimed.ran.ran} if reclaimed.ran else set()
    assert ran >= {FIRST, LATEST}, reclaimed.ran  # what the record keeps: Start again's `next`
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "alice")
        await page.goto(f"{hub.info['url']}{PREFIX}")
        row = page.locator(f'table.reclaims tr[data-reclaim="{reclaimed.id}"]')
        await row.get_by_role("link", name="Start again").click()
        # the spawn page asks the cluster what is free beside each GPU profile: slow under load;
        # its form is what is waited for, not its load event (which waits for every resource)
        await page.wait_for_url(re.compile(r"/hub/spawn/alice\?next="), timeout=90_000, wait_until="commit")
        await page.get_by_label(GPU_PROFILE).check(timeout=90_000)
        await page.get_by_role("button", name="Start").click()
        await page.wait_for_url(re.compile(r"/user/alice/lab/tree/"), timeout=180_000)
        for path in (FIRST, LATEST):
            await expect(tab(page, path)).to_be_visible(timeout=60_000)
        await expect(page.locator(".jp-NotebookPanel")).to_have_count(2)
    finally:
        await page.context.close()
