"""What a new user of `make demo` does, in a real browser (Chromium driven by Playwright):
log in, pick the GPU profile, watch the spawn page report the pod's events, get JupyterLab
(with the GPU reclaim extension's server side), create a notebook from the Launcher, run a
cell, stop the server from the hub's home page.

The stack is the demo's (tests/support/live.py: the demo's cluster with fast image pulls and a
JupyterHub on gpu_reclaim_sim/demo_config/jupyterhub_config.py). All waits are on events, with generous
timeouts; nothing sleeps for a fixed time."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright, expect

from ..support.browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.integration

PASSWORD = "test-password"  # GPU_RECLAIM_DEMO_PASSWORD of the hub fixture
USER = "bob"  # one of the demo's allowed users; this module has its own hub and cluster
GPU_PROFILE = "1 × NVIDIA A100 (40 GB)"
GPU_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02"
SCREENSHOT = Path(os.environ.get("GPU_RECLAIM_DEMO_SCREENSHOT", "/tmp/demo.png"))


@pytest.fixture
async def page():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (apt-get install chromium)")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            context.set_default_timeout(30_000)
            yield await context.new_page()
        finally:
            await browser.close()


async def log_in(page: Page, url: str, user: str, password: str) -> None:
    await page.goto(f"{url}/hub/login")
    await page.get_by_label("Username").fill(user)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()


async def test_wrong_password_shows_error_and_does_not_log_in(hub, page):
    url = hub.info["url"]
    await log_in(page, url, USER, "not-the-password")
    await expect(page.locator(".login_error")).to_have_text("Invalid username or password")
    await expect(page).to_have_url(re.compile(r"/hub/login"))
    # not logged in: the home page sends the browser back to the login form
    await page.goto(f"{url}/hub/home")
    await expect(page).to_have_url(re.compile(r"/hub/login"))
    await expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    await expect(page.get_by_text(USER, exact=True)).to_have_count(0)  # no user name in the nav bar


async def test_log_in_start_gpu_server_and_run_a_cell(hub, api, page):
    url = hub.info["url"]
    await log_in(page, url, USER, PASSWORD)

    # the spawn page: pick the GPU profile and start
    await page.wait_for_url(re.compile(r"/hub/spawn$"))
    await page.get_by_label(GPU_PROFILE).check()
    await page.get_by_role("button", name="Start").click()

    # the pending page streams the pod's events: scheduled on a GPU node, image pulled
    await page.wait_for_url(re.compile(rf"/hub/spawn-pending/{USER}"))
    await page.get_by_text("Event log").click()
    await expect(page.locator("#progress-log")).to_contain_text(
        re.compile(rf"Successfully assigned jhub/jupyter-{USER} to gpu-\d+.*Pulling image \"{re.escape(GPU_IMAGE)}\"", re.S),
        timeout=60_000)

    # ready: the page moves on to JupyterLab by itself
    await page.wait_for_url(re.compile(rf"/user/{USER}/lab"), timeout=120_000)
    # with the JupyterLab extension's server side, installed as the demo has it (scripts/setup.sh):
    # its status answers (this hub runs no reclaim service: not available), not a 404
    status = await page.request.get(f"{url}/user/{USER}/gpu-reclaim/status")
    assert status.status == 200 and await status.json() == {"available": False}
    notebook_tile = page.locator('.jp-LauncherCard[data-category="Notebook"]').filter(has_text="Python 3")
    await notebook_tile.click(timeout=60_000)
    # wait for the kernel, as a person waits for "Idle": a cell run before is dropped
    await expect(page.get_by_role("button", name=re.compile(r"Python 3 \(ipykernel\) \| Idle"))).to_be_visible(timeout=60_000)

    cells = page.locator(".jp-Notebook .jp-CodeCell")
    await cells.first.locator(".cm-content").click()
    await page.keyboard.type("print(6*7)")
    await page.keyboard.press("Shift+Enter")
    await expect(cells.first.locator(".jp-OutputArea-output")).to_have_text("42", timeout=60_000)
    await expect(cells.first.locator(".jp-InputPrompt")).to_have_text("[1]:")

    # the demo's own suggestion works from a cell: the simulated GPU of this pod gets busy
    await cells.nth(1).locator(".cm-content").click()
    await page.keyboard.type("from gpu_reclaim_sim.gpu import use_gpu; use_gpu(percent=90, seconds=1)")
    await page.keyboard.press("Shift+Enter")
    await expect(cells.nth(1).locator(".jp-OutputArea-output")).to_contain_text("'utilization': 90.0", timeout=60_000)
    await page.screenshot(path=str(SCREENSHOT))

    # stop the server as a person does: the hub's home page, once its scripts are in (the
    # button's handler comes with home.js: a click before it is lost, as a person's would be)
    await page.goto(f"{url}/hub/home", wait_until="networkidle")
    await page.get_by_role("button", name="Stop My Server").click()
    await expect(page.get_by_role("button", name="Start My Server")).to_be_visible(timeout=60_000)
    assert await api.server(USER) is None
