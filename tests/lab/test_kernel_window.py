"""The kernels' window when their server stops, on a real jupyter-server with real kernels (no
hub: the server gets its grace period from the environment, as GPUReclaimSpawner sets it,
and SIGTERM, as the kubelet sends it). With a window, checkpoints registered with on_reclaim
or atexit that take seconds are written; on_reclaim callbacks run once however often they
were registered, not in a forked child, not when a kernel alone is shut down, and one that
fails does not stop the next; one that never returns is cut at the deadline. Without a
window, or with a bad one, the server stops as jupyter-server does. The live test on the hub
and the simulated cluster: tests/service/test_kernel_window_live.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time

import pytest

from jupyterhub_gpu_reclaim.spawner.reclaim_window import GRACE_ENV as SPAWNER_GRACE_ENV
from jupyterhub_gpu_reclaim_lab import deadline, on_reclaim
from jupyterhub_gpu_reclaim_lab.stopping import GRACE_ENV, remove_stale, write_deadline
from jupyterhub_gpu_reclaim_lab.window import MARGIN

from ..support.lab_server import Server

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
