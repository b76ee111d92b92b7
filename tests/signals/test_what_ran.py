"""What ran in a server, from the kernels' probe (`KernelSignal.probe_all`: `/api/sessions` and
`/api/terminals`), against a tiny aiohttp server on 127.0.0.1 answering as jupyter-server
does. The user controls the answer: markup and odd Unicode in names, malformed entries,
thousands of kernels (capped), a sessions endpoint that fails (what ran is not known, the
policy's kernels still are)."""

from __future__ import annotations

import datetime as dt

import pytest
from aiohttp import web

from jupyterhub_gpu_reclaim.policy.observations import MAX_RAN, Kernel, Ran
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal

from ..support.hubapi import StaticProbeToken
from ..support.signal_inputs import Server

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = "secret-token-123"
KERNEL = {"id": "k1", "name": "python3", "last_activity": "2026-01-01T00:00:00Z", "execution_state": "idle",
          "connections": 0}


@pytest.fixture
async def server():
    s = Server()
    yield s
    await s.stop()


def jupyter_server(server: Server, sessions, terminals=(), kernels=(KERNEL,)):
    """/api/kernels, /api/terminals and /api/sessions; `sessions` an int: that status."""
    async def handler(request):
        server.requests.append(request)
        body = {"kernels": list(kernels), "terminals": list(terminals), "sessions": sessions}[request.path.rsplit("/", 1)[1]]
        if isinstance(body, int):
            return web.Response(status=body, text="nope")
        return web.json_response(body)
    for name in ("kernels", "terminals", "sessions"):
        server.app.router.add_get(f"/user/alice/api/{name}", handler)


def session(path, minute=0, kind="notebook"):
    return {"id": path, "path": path, "name": path, "type": kind,
            "kernel": {**KERNEL, "last_activity": f"2026-01-01T00:{minute:02d}:00Z"}}


async def probe(server):
    await server.start()
    async with KernelSignal(StaticProbeToken(TOKEN)) as ks:
        return await ks.probe_all("alice", "", "/user/alice/", server.url)


async def test_the_probe_says_what_ran_latest_first_never_counting_as_activity(server):
    jupyter_server(server, [session("work/a.ipynb", 1), session("b.ipynb", 3), session("Console-1", 2, "console")],
                   [{"name": "1", "last_activity": "2026-01-01T00:04:00Z"}])
    probed = await probe(server)
    assert probed.kernels == [Kernel("idle", T0)] and probed.terminals == [T0 + dt.timedelta(minutes=4)]
    assert probed.ran is not None and probed.ran.more == 0
    assert [(r.kind, r.path) for r in probed.ran.ran] == [
        ("terminal", "1"), ("notebook", "b.ipynb"), ("console", "Console-1"), ("notebook", "work/a.ipynb")]
    assert probed.ran.ran[1] == Ran("notebook", "b.ipynb", T0 + dt.timedelta(minutes=3))
    assert {r.path for r in server.requests} == {f"/user/alice/api/{n}" for n in ("kernels", "terminals", "sessions")}
    assert all(r.query["no_track_activity"] == "1" for r in server.requests)


async def test_hostile_names_are_kept_as_text_or_left_out_and_counted(server):
    names = ["<img src=x onerror=alert(1)>.ipynb", "\u202eblah.ipynb", "日本語/🙂 notebook.ipynb", "a\x00b.ipynb"]
    malformed = [{"path": "\ud800.ipynb", "kernel": KERNEL}, {"path": 7}, {"path": "x" * 5000}, "not an object",
                 {"path": "ok.ipynb", "kernel": {"last_activity": "yesterday"}}, {"type": "notebook"}]
    jupyter_server(server, [session(n, i) for i, n in enumerate(names)] + malformed)
    probed = await probe(server)
    assert probed.ran is not None
    assert sorted(r.path for r in probed.ran.ran) == sorted(names)
    assert probed.ran.more == len(malformed)


async def test_thousands_of_kernels_are_capped(server):
    jupyter_server(server, [session(f"n{i}.ipynb", i % 60) for i in range(3000)],
                   [{"name": str(i), "last_activity": None} for i in range(500)])
    probed = await probe(server)
    assert probed.ran is not None and len(probed.ran.ran) == MAX_RAN and probed.ran.more == 3500 - MAX_RAN
    assert all(r.last_activity == T0 + dt.timedelta(minutes=59) for r in probed.ran.ran)  # the latest kept


@pytest.mark.parametrize("answer", [404, 500, {"not": "a list"}])
async def test_a_server_that_does_not_say_leaves_it_not_known(server, answer):
    jupyter_server(server, answer)
    probed = await probe(server)
    assert probed.kernels == [Kernel("idle", T0)]  # what the policy reads is there
    assert probed.ran is None
