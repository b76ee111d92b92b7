"""Save before the stop, the server's side (lab/jupyterhub_gpu_reclaim_lab/saving.py), on a
real jupyter-server with no hub; the tab is played by the test on the server's event bus, as
JupyterLab's EventManager subscribes to it. A server with no tab open answers at once; a
round waits for each tab it asked, and at most its bound, however long a tab's save of a
100 MB notebook takes (the file on disk keeps its last whole save); in dry run nothing is
saved; a wrong token is refused and cannot make the server save; bad reports are refused;
a server stopped while a round runs exits at once. The whole path in Chromium on the hub:
test_save_before_stop.py."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from jupyterhub_gpu_reclaim_lab.saving import MAX_DOCUMENTS, SCHEMA_ID

from ..support.lab_server import Server

NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture
async def server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, None)
    await s.ready()
    s.base = f"http://127.0.0.1:{s.port}"
    yield s
    await s.close()


async def ask(s: Server, **body) -> tuple[float, dict]:
    """The service's ask (POST gpu-reclaim/save): seconds it took, and the answer."""
    t0 = time.monotonic()
    async with s.http.post(f"{s.base}/gpu-reclaim/save", json=body) as r:
        assert r.status == 200, await r.text()
        return time.monotonic() - t0, await r.json()


async def report(s: Server, round_id: str, documents: list, done: bool, tab: str = "tab-1") -> int:
    async with s.http.post(f"{s.base}/gpu-reclaim/saved",
                           json={"round": round_id, "tab": tab, "documents": documents, "done": done}) as r:
        return r.status


def last_whole_save(home, name: str) -> dict:
    """The notebook `name` as jupyter-server's atomic writing leaves it at any moment: the
    file once written whole, else its intermediate copy of the last save (`.~name`)."""
    while True:
        try:
            return json.loads((home / name).read_text())
        except ValueError:
            pass
        try:
            return json.loads((home / f".~{name}").read_text())
        except FileNotFoundError:  # the write ended between the two reads: the file is whole
            continue


class Tab:
    """A tab listening on the server's event bus: the asks it got."""

    def __init__(self, s: Server) -> None:
        self.s = s

    async def __aenter__(self) -> Tab:
        self.ws = await self.s.http.ws_connect(f"ws://127.0.0.1:{self.s.port}/api/events/subscribe")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()

    async def next_ask(self) -> dict:
        while True:
            event = json.loads((await self.ws.receive(timeout=30)).data)
            if event.get("schema_id") == SCHEMA_ID:
                return event


async def test_no_tab_open_answers_at_once(server):
    seconds, answer = await ask(server, wait=30)
    assert answer == {"tabs": 0, "documents": []}
    assert seconds < 30


async def test_a_round_waits_for_its_tab_and_answers_what_was_saved(server):
    async with Tab(server) as tab:
        asked = asyncio.create_task(ask(server, wait=60))
        event = await tab.next_ask()
        assert event["action"] == "save" and event["reason"] == "stop"
        docs = [{"path": "a.ipynb", "outcome": "saved", "message": ""},
                {"path": "untitled.txt", "outcome": "saved", "message": ""},
                {"path": "theirs.ipynb", "outcome": "conflict", "message": ""}]
        assert await report(server, event["round"], docs, done=True) == 204
        seconds, answer = await asked
    assert seconds < 60  # the tab said it was done: no wait for the bound
    assert answer["tabs"] == 1
    assert [(d["path"], d["outcome"], d["reason"]) for d in answer["documents"]] == [
        ("a.ipynb", "saved", "stop"), ("untitled.txt", "saved", "stop"), ("theirs.ipynb", "conflict", "stop")]
    assert all(d["at"].endswith("Z") for d in answer["documents"])
    assert await report(server, event["round"], docs, done=True) == 409  # that round is over


async def test_a_100_mb_save_is_bounded_and_the_file_keeps_its_last_whole_save(server):
    """The tab names the document, then saves 100 MB through the contents API; the ask
    answers at its bound with the save unfinished, and the last whole save is on disk
    throughout: the file, or while jupyter-server writes it, the copy beside it that it
    puts back when the notebook is next read if the write was cut short."""
    big = dict(NOTEBOOK, metadata={"blob": "x" * 100_000_000})
    async with server.http.put(f"{server.url}/contents/big.ipynb",
                               json={"type": "notebook", "format": "json", "content": NOTEBOOK}) as r:
        assert r.status == 201
    async with Tab(server) as tab:
        asked = asyncio.create_task(ask(server, wait=2))
        event = await tab.next_ask()
        assert await report(server, event["round"], [{"path": "big.ipynb", "outcome": "saving"}], done=False) == 204
        save = asyncio.create_task(server.http.put(f"{server.url}/contents/big.ipynb", json={
            "type": "notebook", "format": "json", "content": big}))
        seconds, answer = await asked
        assert 2 <= seconds < 10  # the bound, not the save's time
        assert [(d["path"], d["outcome"]) for d in answer["documents"]] == [("big.ipynb", "saving")]
        assert last_whole_save(server.home, "big.ipynb")["nbformat"] == 4
        (await save).release()
    assert len(json.loads((server.home / "big.ipynb").read_text())["metadata"]["blob"]) == 100_000_000


async def test_dry_run_lists_and_saves_nothing(server):
    async with Tab(server) as tab:
        asked = asyncio.create_task(ask(server, dry_run=True, wait=30))
        event = await tab.next_ask()
        assert event["action"] == "list"
        assert await report(server, event["round"], [{"path": "a.ipynb", "outcome": "saving"}], done=True) == 204
        _, answer = await asked
    assert [(d["path"], d["outcome"]) for d in answer["documents"]] == [("a.ipynb", "would-save")]
    _, real = await ask(server, wait=1)
    assert real == {"tabs": 0, "documents": []}  # nothing was saved


async def test_another_token_cannot_make_the_server_save(server):
    async with Tab(server) as tab:
        async with aiohttp.ClientSession(headers={"Authorization": "token not-the-servers"}) as other:
            for path, body in (("save", {"wait": 1}), ("saved", {"round": "x", "tab": "t", "documents": []})):
                async with other.post(f"{server.base}/gpu-reclaim/{path}", json=body) as r:
                    assert r.status == 403
        with pytest.raises(asyncio.TimeoutError):
            await tab.ws.receive(timeout=2)  # no ask went out


BAD_REPORTS = [
    b"not json", b"[]", {"round": 1, "tab": "t"}, {"round": "r", "tab": ""}, {"round": "r", "tab": "t" * 65},
    {"round": "r", "tab": "t", "documents": "a.ipynb"}, {"round": "r", "tab": "t", "done": "yes"},
    {"round": "r", "tab": "t", "documents": [{"path": "a", "outcome": "deleted"}]},
    {"round": "r", "tab": "t", "documents": [{"path": "", "outcome": "saved"}]},
    {"round": "r", "tab": "t", "documents": [{"path": "x" * 1025, "outcome": "saved"}]},
    {"round": "r", "tab": "t", "documents": [{"path": f"{i}", "outcome": "saved"} for i in range(MAX_DOCUMENTS + 1)]},
]
BAD_ASKS = [{"wait": -1}, {"wait": 121}, {"wait": "10"}, {"wait": True}, {"dry_run": "no"}, []]


async def test_bad_reports_and_asks_are_refused_and_change_nothing(server):
    for path, bodies in (("saved", BAD_REPORTS), ("save", BAD_ASKS)):
        for body in bodies:
            kw = {"data": body} if isinstance(body, bytes) else {"json": body}
            async with server.http.post(f"{server.base}/gpu-reclaim/{path}", **kw) as r:
                assert r.status == 400, (path, body, await r.text())
    _, answer = await ask(server, wait=1)
    assert answer == {"tabs": 0, "documents": []}


async def test_a_server_stopped_while_a_round_runs_exits_at_once(server):
    """The user stops the server while its tabs save: nothing holds it."""
    async with Tab(server) as tab:
        asked = asyncio.create_task(ask(server, wait=60))
        await tab.next_ask()
        seconds = await server.sigterm()
    assert seconds < 30
    with pytest.raises((aiohttp.ClientError, AssertionError)):
        await asked
