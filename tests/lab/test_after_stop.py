"""JupyterLab after a reclaim (issue 39), in Chromium on the real hub, simulated cluster and
service, the servers wired as docs/lab.md says (tests/lab/jupyterhub_config_lab.py).

alice's never-used GPU is warned: the notification's three buttons sit on one line at
JupyterLab's own toast width. She keeps her server alive for 2 h; a minute later an admin
reclaims it anyway (*Reclaim now*). As the server stops, her tab says why, in the service's
words, what is kept and lost, and offers *Start again*, the hub's spawn page of her server;
it comes before JupyterLab's own "Server unavailable" dialog, which queues behind it. Her
JupyterLab wears its dark theme: every text of the extension reads at WCAG AA contrast."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import expect

from ..support.browser import IMG, log_in, low_contrast, new_page
from ..support.live import api_fixture
from ..support.service_hub import until
from ..support.web_client import Client, start_web_hub, user_token
from ..support.lab_page import STATUS, WARNING, service_session, warned

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
GPU = "gpu-1"
DIALOG = ".jp-Dialog"


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, hub_config=HERE / "jupyterhub_config_lab.py")
    yield child
    child.stop(grace=60)


api = api_fixture("module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lab(hub, api, browser):
    await api.start("alice", GPU)
    await api.wait_ready("alice")
    # her JupyterLab in its dark theme: every text of ours reads at WCAG AA there too
    async with api.session.put(f"{api.url}/user/alice/lab/api/settings/@jupyterlab/apputils-extension:themes",
                               json={"raw": json.dumps({"theme": "JupyterLab Dark"})}) as r:
        assert r.status in (200, 204), await r.text()
    page = await new_page(browser)
    await log_in(page, hub.info["url"], "alice")
    await page.goto(f"{hub.info['url']}/user/alice/lab")
    await expect(page.locator(STATUS)).to_be_visible(timeout=60_000)
    await expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")  # dark
    yield page
    await page.context.close()


async def test_the_warnings_buttons_fit_on_one_line(hub, api, lab):
    await until(lambda: warned(hub, api, "alice"), 60, "alice's GPU session is warned")
    toast = lab.locator(".Toastify__toast", has_text=WARNING)
    await expect(toast).to_be_visible(timeout=30_000)
    buttons = toast.locator("button.jp-toast-button")
    await expect(buttons).to_have_count(3)
    tops = {round((await b.bounding_box())["y"]) for b in await buttons.all()}
    assert len(tops) == 1, tops
    assert await low_contrast(toast) == [] and await low_contrast(lab.locator(STATUS)) == []
    await toast.screenshot(path=str(IMG / "lab-notification-buttons.png"))


async def test_after_an_admins_reclaim_over_her_keep_alive_the_tab_says_why_with_start_again(hub, api, lab):
    toast = lab.locator(".Toastify__toast", has_text=WARNING)
    await toast.get_by_role("button", name=re.compile("^Keep")).first.click()
    await until(lambda: _kept(hub, api), 30, "alice's server kept alive")
    admin = Client(hub.info["url"], await user_token(api, "admin"))
    try:
        status, body = await admin.json("POST", "api/admin/actions", {"action": "reclaim", "session": "alice/"})
        assert status == 200, body
    finally:
        await admin.close()
    dialog = lab.locator(DIALOG).first
    await expect(dialog).to_contain_text("The GPU reclaim stopped this server", timeout=60_000)
    # why, in the service's words (service/reasons.py), what is kept and lost (wording.py)
    await expect(dialog.locator(".jp-GpuReclaim-why")).to_have_text(re.compile(r"^An admin \(admin\) reclaimed it\.$"))
    await expect(dialog.locator(".jp-GpuReclaim-kept")).to_have_text("Kept: files under your home directory.")
    await expect(dialog.locator(".jp-GpuReclaim-lost")).to_contain_text("Lost: running processes")
    again = dialog.get_by_role("link", name="Start again")
    await expect(again).to_have_attribute("href", re.compile(r"^/hub/spawn/alice(\?next=|$)"))
    assert await low_contrast(dialog) == []
    await lab.screenshot(path=str(IMG / "lab-after-reclaim.png"))
    await until(lambda: _gone(api), 60, "alice's server stopped")
    # JupyterLab's own dialog, if it comes, waits until hers is closed
    await expect(lab.locator(DIALOG)).to_have_count(1)
    await expect(dialog).to_contain_text("The GPU reclaim stopped this server")
    await again.click()
    await expect(lab).to_have_url(re.compile(r"/hub/spawn"), timeout=30_000)


async def _kept(hub, api) -> bool:
    return ((await service_session(hub, api, "alice")) or {}).get("state") == "kept"


async def _gone(api) -> bool:
    return await api.server("alice") is None
