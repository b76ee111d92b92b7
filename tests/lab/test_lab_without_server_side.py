"""The JupyterLab extension half installed (issue 39): the frontend in a JupyterLab whose
server has not enabled the server side, in Chromium. Its `gpu-reclaim/status` answers 404:
the frontend asks again at most every 10 min (each request is the server's activity), says
once in the browser's console how to find out what is missing, and shows the user nothing."""

from __future__ import annotations

import pytest
import pytest_asyncio
from playwright.async_api import expect

from ..support.browser import new_page
from ..support.lab_server import Server
from ..support.service_hub import until
from ..support.lab_page import COUNT_POLLS, STATUS

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CHECK = "python -m jupyterhub_gpu_reclaim_lab.install_check"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    s = Server(home, None, ("--ServerApp.jpserver_extensions=jupyterhub_gpu_reclaim_lab=False",))
    try:
        await s.ready()
        yield s
    finally:
        await s.close()


async def test_a_404_is_asked_again_rarely_and_said_once_in_the_console(server, browser):
    page = await new_page(browser)
    console: list[str] = []
    answers: list[int] = []
    page.on("console", lambda message: console.append(message.text))
    page.on("response", lambda r: answers.append(r.status) if r.url.split("?")[0].endswith("/gpu-reclaim/status")
            else None)
    try:
        await page.add_init_script(COUNT_POLLS)
        await page.clock.install()
        await page.goto(f"http://127.0.0.1:{server.port}/lab?token={server.token}")
        await expect(page.locator("#jp-main-statusbar")).to_be_visible(timeout=60_000)
        await until(lambda: bool(answers), 30, "the first look at the state")
        assert answers == [404]
        await page.clock.run_for(60_000)
        await page.clock.run_for(60_000)
        assert await page.evaluate("window.__gpuReclaimPolls") == 1 and answers == [404]
        told = [line for line in console if CHECK in line]
        assert len(told) == 1, console
        assert "server side is not installed or not enabled" in told[0]
        await expect(page.locator(STATUS)).to_be_hidden()
    finally:
        await page.context.close()
