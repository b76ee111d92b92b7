"""The kernels' window when their server stops, on a real jupyter-server with real kernels (no
hub: the server gets its grace period from the environment, as GPUReclaimSpawner sets it,
and SIGTERM, as the kubelet sends it). With a window, checkpoints registered with on_reclaim
or atexit that take seconds are written; on_reclaim callbacks run once however often they
were registered, not in a forked child, not when a kernel alone is shut down, and one that
fails does not stop the next; one that never returns is cut at the deadline. Without a
window, or with a bad one, the server stops as jupyter-server does. The live test on the hub
and the simulated cluster: tests/service/test_kernel_window_live.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import pytest

from gpu_reclaim_sim.launch import free_port
from jupyterhub_gpu_reclaim.spawner.reclaim_window import GRACE_ENV as SPAWNER_GRACE_ENV
from jupyterhub_gpu_reclaim_lab import deadline, on_reclaim
from jupyterhub_gpu_reclaim_lab.stopping import GRACE_ENV, remove_stale, write_deadline
from jupyterhub_gpu_reclaim_lab.window import MARGIN

CHECKPOINT = """
import json, os, time
state = {"epoch": 7, "loss": 0.125}

def save(name):
    def write():
        time.sleep(3)  # longer than the 2.5 s jupyter-server's own shutdown wait gives
        with open(os.path.expanduser(name), "w") as f:
            json.dump(dict(state, deadline=str(deadline()) if "deadline" in globals() else None), f)
    return write
"""
KERNELS = {
    "helper": CHECKPOINT + "from jupyterhub_gpu_reclaim_lab import on_reclaim, deadline\n"
                           "print(deadline())\non_reclaim(save('~/helper.json'))\n",
    "atexit": CHECKPOINT + "import atexit\natexit.register(save('~/atexit.json'))\n",
    "hostile": """
import os, sys, time
from jupyterhub_gpu_reclaim_lab import on_reclaim

def count():
    with open(os.path.expanduser("~/count.txt"), "a") as f:
        f.write(f"{os.getpid()}\\n")

def fork():
    if os.fork() == 0:  # a child that exits (its atexit handlers run), and one that stays
        if os.fork() == 0:
            open(os.path.expanduser("~/stays.pid"), "w").write(str(os.getpid()))
            time.sleep(600)
        sys.exit(0)

def fails():
    raise ValueError("a broken checkpoint")

def after():
    count()

for _ in range(10_000):
    on_reclaim(count)
on_reclaim(fork)
on_reclaim(fails)
on_reclaim(count)  # again: still once, where first registered
on_reclaim(after)
""",
    "alone": CHECKPOINT + "from jupyterhub_gpu_reclaim_lab import on_reclaim\non_reclaim(save('~/alone.json'))\n",
}


class Server:
    """jupyter-server from this environment (it loads jupyterhub_gpu_reclaim_lab as the user
    image does), HOME in `home`, `grace` in its environment (None: unset)."""

    def __init__(self, home: Path, grace: str | None) -> None:
        self.home, self.port, self.token = home, free_port(), uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env.update(HOME=str(home), **({GRACE_ENV: grace} if grace is not None else {}))
        self.log = home.parent / f"{home.name}-server.log"
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("jupyter-server")), "--no-browser", "--allow-root",
             f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={home}"], env=env, cwd=home, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.http = aiohttp.ClientSession(headers={"Authorization": f"token {self.token}"})

    async def ready(self) -> None:
        for _ in range(300):
            try:
                async with self.http.get(f"{self.url}/status") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"jupyter-server did not start: {self.log.read_text()[-3000:]}")

    async def kernel(self, code: str) -> tuple[str, str]:
        """A new kernel that ran `code`: its id and stdout."""
        async with self.http.post(f"{self.url}/kernels", json={"name": "python3"}) as r:
            assert r.status == 201, await r.text()
            kernel_id = (await r.json())["id"]
        msg_id = uuid.uuid4().hex
        out = []
        async with self.http.ws_connect(f"ws://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels") as ws:
            await ws.send_str(json.dumps({
                "header": {"msg_id": msg_id, "username": "t", "session": uuid.uuid4().hex,
                           "msg_type": "execute_request", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            async for frame in ws:
                msg = json.loads(frame.data)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "error":
                    raise AssertionError("\n".join(msg["content"]["traceback"]))
                if kind == "stream":
                    out.append(msg["content"]["text"])
                if kind == "status" and msg["content"]["execution_state"] == "idle":
                    return kernel_id, "".join(out)
        raise AssertionError("the kernel's channel closed")

    async def shut_down_kernel(self, kernel_id: str) -> None:
        async with self.http.delete(f"{self.url}/kernels/{kernel_id}") as r:
            assert r.status == 204, await r.text()

    async def sigterm(self) -> float:
        """SIGTERM, as the kubelet sends it; seconds until the server exited."""
        await self.http.close()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self.proc.wait, 120)
        return time.monotonic() - t0

    async def close(self) -> None:
        await self.http.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
async def server(tmp_path):
    made: list[Server] = []

    async def start(grace: str | None) -> Server:
        home = tmp_path / f"home{len(made)}"
        home.mkdir()
        made.append(Server(home, grace))
        await made[-1].ready()
        return made[-1]

    yield start
    for s in made:
        await s.close()


async def test_with_a_window_checkpoints_are_written_and_hostile_callbacks_do_no_harm(server):
    s = await server("30")
    _, before = await s.kernel(KERNELS["helper"])
    assert before.strip() == "None"  # no deadline while the server is not stopping
    plain, _ = await s.kernel(KERNELS["atexit"])
    await s.kernel(KERNELS["hostile"])
    alone, _ = await s.kernel(KERNELS["alone"])
    await s.shut_down_kernel(alone)  # a kernel shut down alone: not a stop of the server
    t0 = time.time()
    await s.sigterm()
    helper = json.loads((s.home / "helper.json").read_text())
    assert {k: helper[k] for k in ("epoch", "loss")} == {"epoch": 7, "loss": 0.125}
    # its deadline: the grace period less the margin kept for the server's exit
    assert abs(dt.datetime.fromisoformat(helper["deadline"]).timestamp() - (t0 + 30 - MARGIN)) < 3
    assert json.loads((s.home / "atexit.json").read_text()) == {"epoch": 7, "loss": 0.125, "deadline": None}
    # count ran once however often registered, in the kernel only (not in the forked
    # children), and the callback after the failing one ran too
    stays = int((s.home / "stays.pid").read_text())
    os.kill(stays, signal.SIGKILL)  # in a pod, the container's end kills it
    pids = (s.home / "count.txt").read_text().split()
    assert len(pids) == 2 and len(set(pids)) == 1 and int(pids[0]) != stays, pids
    assert "a broken checkpoint" in s.log.read_text()
    assert not (s.home / "alone.json").exists()
    # on_reclaim's kernels removed their deadline files; the next start removes the others'
    runtime = s.home / ".local/share/jupyter/runtime"
    assert [p.name for p in runtime.glob("kernel-*.stop-deadline")] == [f"kernel-{plain}.stop-deadline"]


async def test_a_callback_that_never_returns_is_cut_at_the_deadline(server):
    s = await server("12")
    await s.kernel("import time\nfrom jupyterhub_gpu_reclaim_lab import on_reclaim\n"
                   "on_reclaim(lambda: time.sleep(10**6))\n")
    took = await s.sigterm()
    # SIGTERM to the kernel at the deadline (12 - MARGIN s); the kubelet would kill at 12 s
    assert 12 - MARGIN - 1 < took < 12, took
    assert "have 7 s to exit" in s.log.read_text()


@pytest.mark.parametrize("grace", [None, "soon", "0"])
async def test_without_a_window_the_server_stops_as_jupyter_server_does(server, grace):
    s = await server(grace)
    await s.kernel(KERNELS["helper"])
    await s.kernel(KERNELS["atexit"])
    await s.sigterm()
    # no on_reclaim without a window; atexit's 3 s checkpoint is killed at jupyter-server's
    # 2.5 s (its SIGTERM after half of shutdown_wait_time, 5 s)
    assert not (s.home / "helper.json").exists() and not (s.home / "atexit.json").exists()
    assert ("is not a number of seconds" in s.log.read_text()) == (grace == "soon")


def test_the_helper_says_clearly_where_it_works():
    with pytest.raises(RuntimeError, match="in a Jupyter kernel"):
        on_reclaim(print)
    with pytest.raises(TypeError, match="a function without arguments"):
        on_reclaim("save")  # type: ignore[type-var]
    assert deadline() is None


def test_deadline_files_of_stops_that_are_over_are_removed_at_start(tmp_path):
    now = time.time()
    for name, t in (("over", now - 1), ("going-on", now + 30)):  # the latter: another server's stop
        write_deadline(tmp_path / f"kernel-{name}.json", t)
    (tmp_path / "kernel-broken.stop-deadline").write_text("{")
    (tmp_path / "kernel-x.json").write_text("{}")  # a connection file is never touched
    assert remove_stale(tmp_path, now) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel-going-on.stop-deadline", "kernel-x.json"]


def test_the_spawner_and_the_server_name_the_same_variable():
    assert GRACE_ENV == SPAWNER_GRACE_ENV
