"""Save before the stop (issue 38, point 1), end to end: a real JupyterHub with the service
over GPUReclaimSpawner on the simulated cluster, a real JupyterLab 4 in Debian's Chromium.

alice has made JupyterLab's autosave an hour (as a user may). She edits a notebook named
with markup and odd Unicode and a new untitled text file, and leaves them unsaved in a tab
she puts in the background. Her never-used GPU is warned; 45 s before the reclaim time the
server asks the tab to save (the lead), and the files on disk hold her edits; she edits the
notebook once more, and as the service stops the server it asks again (the stop): the file
holds that edit too. Her page says which documents were saved, and when; the names are
text, not markup. The hidden tab asked nothing by itself; as the server stopped, it was told why, what it saved
and where to start again, shown when she comes back to it."""

from __future__ import annotations

import datetime as dt
import json
import re
from zoneinfo import ZoneInfo
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import expect

from jupyterhub_gpu_reclaim.store import Store

from ..support.browser import local_clock, log_in, new_page, show, times_in
from ..support.hubapi import HubAPI
from ..support.sim_cluster import home
from ..support.service_hub import until
from ..support.web_client import PREFIX, start_web_hub, user_token

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
NEW_YORK = ZoneInfo("America/New_York")
NOTEBOOK = 'Modèle <b onmouseover="x">gras 🙂\u202egnp.ipynb'
CELL = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
        "source": "before = 'saved by hand'"}
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# the GPU is never used (the notebook's kernel starting is a sign of work: then idle): warned at
# 60 s, reclaimed at 130 s (the lead: at 85 s)
OPTIONS = {"never_used_warn_after": 60, "never_used_reclaim_after": 130, "idle_warn_after": 60,
           "idle_reclaim_after": 130, "warning_lead": 30}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim, hub_config=HERE / "jupyterhub_config_save.py",
                          **OPTIONS)
    yield child
    child.stop(grace=60)


def cell_source(path: Path) -> str:
    source = json.loads(path.read_text())["cells"][0]["source"]
    return "".join(source) if isinstance(source, list) else source


async def type_into(page, editor, text: str) -> None:
    """Replace what `editor` (a CodeMirror editor of the page) holds with `text`, as typed."""
    await editor.click()
    await page.keyboard.press("Control+a")
    await page.keyboard.type(text)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub, sim, browser):
    """alice's unsaved edits in a hidden tab, saved at the lead and at the stop; yields
    (the reclaim record, her home, the untitled file's name, the requests of the hidden tab)."""
    async with HubAPI.of(hub) as api:
        await api.start("alice", "gpu-1")
        await api.wait_ready("alice")
        base = f"{api.url}/user/alice"
        async with api.session.put(f"{base}/lab/api/settings/@jupyterlab/docmanager-extension:plugin",
                                   json={"raw": json.dumps({"autosaveInterval": 3600})}) as r:
            assert r.status in (200, 204), await r.text()
        notebook = {"cells": [CELL], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
        async with api.session.put(f"{base}/api/contents/{quote(NOTEBOOK)}",
                                   json={"type": "notebook", "format": "json", "content": notebook}) as r:
            assert r.status in (200, 201), await r.text()
        where = home(sim, "alice")

        page = await new_page(browser, "America/New_York")  # the dialog's times in her zone
        try:
            await log_in(page, hub.info["url"], "alice")
            await page.goto(f"{hub.info['url']}/user/alice/lab/tree/{quote(NOTEBOOK)}")
            await expect(page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first).to_be_visible(timeout=60_000)
            await type_into(page, page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first, "edited = 'at the lead'")
            await page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
            await page.locator(".lm-Menu-itemLabel", has_text="New").first.hover()
            await page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Text File$")).click()
            text_editor = page.locator(".jp-FileEditor .cm-content")
            await expect(text_editor).to_be_visible()
            await type_into(page, text_editor, "notes never saved by hand")
            untitled = await page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel"
                                          ).text_content()
            assert untitled and untitled.startswith("untitled"), untitled
            await expect(page.locator(".jp-mod-dirty")).to_have_count(2)  # both unsaved
            # bob cannot make her server save (the hub's login refuses him her server)
            async with aiohttp.ClientSession(headers={"Authorization": f"token {await user_token(api, 'bob')}"}) as bob:
                async with bob.post(f"{base}/gpu-reclaim/save", json={"wait": 1}, allow_redirects=False) as r:
                    bob_status = r.status
            await page.wait_for_timeout(2000)
            await expect(page.locator(".jp-mod-dirty")).to_have_count(2)  # nothing was saved for him

            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            await show(page, "hidden")
            await until(lambda: "notes never saved" in _read(where / untitled), 200, "the save at the lead")
            assert "at the lead" in cell_source(where / NOTEBOOK)
            # one more edit, after the lead: the stop's save keeps it
            await page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="gras").click()
            await type_into(page, page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first,
                            "edited = 'at the stop'")

            def stopped():
                with Store.open(hub.info["store"]) as store:
                    return next((r for r in store.reclaims() if r.session == "alice/" and r.outcome == "stopped"),
                                None)

            record = await until(stopped, 200, "alice's server reclaimed")
            told = page.locator(".jp-Dialog", has_text="The GPU reclaim stopped this server")
            await expect(told).to_have_count(1)
            after_stop = {"why": await told.locator(".jp-GpuReclaim-why").text_content(),
                          "times": await times_in(told.locator(".jp-GpuReclaim-why")),
                          "saved": await told.locator(".jp-GpuReclaim-saved-list").text_content(),
                          "again": await told.get_by_role("link", name="Start again").get_attribute("href")}
        finally:
            await page.context.close()
        yield record, where, untitled, requests, bob_status, after_stop


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


async def test_the_files_in_her_home_hold_the_edits(scene):
    _, where, untitled, _, _, _ = scene
    assert cell_source(where / NOTEBOOK) == "edited = 'at the stop'"
    assert (where / untitled).read_text().startswith("notes never saved by hand")


async def test_the_reclaim_record_says_what_was_saved_and_when(scene):
    record, _, untitled, _, _, _ = scene
    assert record.saved is not None and record.saved.tabs == 1 and record.saved.more == 0
    saved = {d.path: d for d in record.saved.documents}
    assert set(saved) == {NOTEBOOK, untitled}
    assert saved[NOTEBOOK].outcome == saved[untitled].outcome == "saved"
    assert saved[NOTEBOOK].reason == "stop" and saved[untitled].reason == "lead"
    # saved before the stop ended (the stop's save comes after the reclaim began, record.t)
    assert record.finished_at is not None
    assert all(d.at is not None and d.at <= record.finished_at for d in saved.values())


async def test_the_hidden_tab_asked_nothing_by_itself(scene):
    """While hidden, the tab's requests are its saves' (the contents API, its reports) and
    the notebook's own (a kernel's messages), never the extension's polls."""
    _, _, _, requests, _, _ = scene
    assert requests and not [u for u in requests if "/gpu-reclaim/status" in u]
    assert [u for u in requests if u.split("?")[0].endswith("/gpu-reclaim/saved")]


async def test_her_page_says_which_documents_were_saved_and_when(hub, scene, browser):
    record, _, untitled, _, _, _ = scene
    page = await new_page(browser)
    try:
        await log_in(page, hub.info["url"], "alice")
        await page.goto(f"{hub.info['url']}{PREFIX}")
        row = page.locator(f'table.reclaims tr[data-reclaim="{record.id}"] .what-saved')
        await expect(row.locator("bdi.path")).to_have_count(2)
        assert sorted(await row.locator("bdi.path").all_text_contents()) == sorted([NOTEBOOK, untitled])
        await expect(row.locator("li", has_text=untitled)).to_contain_text("saved at")
        await expect(row.locator("li", has_text=untitled)).to_contain_text("(ahead of the stop)")
        await expect(row.locator("li time")).to_have_count(2)
        assert await page.locator("table.reclaims b").count() == 0  # the name is text, not markup
    finally:
        await page.context.close()


async def test_another_user_cannot_make_her_server_save(scene):
    assert scene[4] == 403


async def test_the_tab_says_why_the_server_stopped_what_it_saved_and_where_to_start_again(scene):
    """The service's reason (service/reasons.py: the never-used GPU), the documents the tabs
    saved, and Start again: the hub's spawn page, then the notebook she was last active in."""
    record, _, untitled, _, _, told = scene
    assert re.match(r"(Nothing has run on the GPU|The GPU has not been used) since ", told["why"]), told
    # its times in her browser's zone (New York), as the service's pages write them, UTC on hover
    assert told["times"], told
    for time in told["times"]:
        instant = dt.datetime.fromisoformat(time["datetime"].replace("Z", "+00:00"))
        assert instant.utcoffset() is not None and instant <= record.t, time
        assert time["text"] == local_clock(instant, NEW_YORK), time
        assert time["title"] == instant.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), time
        assert re.fullmatch(r" \((\d+ (s|min|h)( \d+ min)?) ago\)\.?", time["after"]), time
    assert "UTC" not in told["why"], told
    assert told["saved"] == f"Saved before the stop: {NOTEBOOK}, {untitled}." or \
        told["saved"] == f"Saved before the stop: {untitled}, {NOTEBOOK}.", told
    assert told["again"].startswith("/hub/spawn/alice?next="), told
