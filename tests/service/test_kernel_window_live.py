"""The kernel's window at a reclaim, end to end: a real JupyterHub runs the service over
GPUReclaimSpawner on the simulated cluster (whose kubelet gives SIGTERM, then SIGKILL at the
end of the pod's grace period), with real single-user servers and kernels. Four GPU sessions
are reclaimed by the policy once idle:

- alice's kernel registered a checkpoint that takes 5 s with `on_reclaim`, bob's with
  `atexit`: both files are in their homes afterwards, holding the kernels' state;
- carol's kernel registered one callback ten thousand times, one that forks a child that
  never exits, and one that never returns: the callback ran once, and the pod is gone, its
  GPU free, within the grace period;
- dave's server has an idle kernel and nothing registered: it goes at once.

erin stops her own server (a CPU one, with the same hanging callback): a user's own stop is
no reclaim, and gets KubeSpawner's delete_grace_period, not the reclaim's.

The times from the stop request (the service's reclaim record, begun just before its
DELETE to the hub) to the pod gone (the cluster's DELETED event) are printed (docs/lab.md
states them)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import urllib.request

import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s, config as k8s_config, watch

from jupyterhub_gpu_reclaim.store import Store

from ..support.hubapi import HubAPI
from ..support.service_hub import HERE, TIMINGS, start_service_hub, until
from ..support.sim_cluster import home

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

GRACE = 20  # the spawner's reclaim_grace_period in this hub (10 to 240)
MARGIN = 5  # jupyterhub_gpu_reclaim_lab.window.MARGIN: kept for the server's own exit
# reclaimed 20 s after the last cell; none before the kernels have their callbacks
OPTIONS = {**TIMINGS, "idle_warn_after": 10, "idle_reclaim_after": 20, "warning_lead": 5}
GPU_USERS = ("alice", "bob", "carol", "dave")

STATE = """
import json, os, time
state = {"epoch": 7, "weights": [0.25, 1.5], "user": os.environ["JUPYTERHUB_USER"]}

def save():
    time.sleep(5)  # saving a model takes longer than the 2 s a plain stop gives
    path = os.path.expanduser("~/checkpoint.json")
    with open(path + ".partial", "w") as f:
        json.dump(state, f)
    os.replace(path + ".partial", path)
"""
CODE = {
    "alice": STATE + "from jupyterhub_gpu_reclaim_lab import on_reclaim\non_reclaim(save)\n",
    "bob": STATE + "import atexit\natexit.register(save)\n",
    "carol": """
import os, time
from jupyterhub_gpu_reclaim_lab import on_reclaim

def count():
    with open(os.path.expanduser("~/count.txt"), "a") as f:
        f.write("ran\\n")

def fork():
    if os.fork() == 0:
        time.sleep(10**6)

for _ in range(10_000):
    on_reclaim(count)
on_reclaim(fork)
on_reclaim(lambda: time.sleep(10**6))
""",
    "dave": "x = 1\n",
}
CODE["erin"] = CODE["alice"] + "on_reclaim(lambda: time.sleep(10**6))\n"


class PodEvents:
    """Each pod's deletion as the cluster reports it (a watch): when its deletion began and
    with what grace period, and when it was gone (wall-clock seconds)."""

    def __init__(self) -> None:
        self.deleting: dict[str, tuple[float, int]] = {}
        self.gone: dict[str, float] = {}

    async def run(self, kubeconfig: str) -> None:
        api = await k8s_config.new_client_from_config(config_file=kubeconfig)
        try:
            core = k8s.CoreV1Api(api)
            while True:
                async with watch.Watch().stream(core.list_namespaced_pod, "jhub", timeout_seconds=300) as stream:
                    async for event in stream:
                        meta = event["object"].metadata
                        if event["type"] == "DELETED":
                            self.gone.setdefault(meta.name, time.time())
                        elif meta.deletion_timestamp is not None:
                            self.deleting.setdefault(meta.name, (time.time(), meta.deletion_grace_period_seconds))
        finally:
            await api.close()


def gpu_pods(sim) -> str:
    """The pods dcgm-exporter reports GPUs for."""
    return urllib.request.urlopen(sim.info["metrics"], timeout=5).read().decode()


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    child = start_service_hub(tmp_path_factory.mktemp("hub"), sim, webhook,
                              hub_config=HERE / "jupyterhub_config_kernel_window.py",
                              env={"GPU_RECLAIM_TEST_GRACE": str(GRACE)}, **OPTIONS)
    yield child
    child.stop(grace=60)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub, sim):
    """The four GPU sessions reclaimed and erin's own stop; yields (api, pod events, reclaim
    records by user)."""
    events = PodEvents()
    watcher = asyncio.create_task(events.run(sim.info["kubeconfig"]))
    try:
        async with HubAPI.of(hub) as api:
            for user in GPU_USERS:
                await api.start(user, "gpu-1")
            await api.start("erin", "cpu")
            for user in (*GPU_USERS, "erin"):
                await api.wait_ready(user)
                await api.run_code(user, CODE[user], keep_kernel=True)
            # erin's own stop, through the hub as the Stop button's (no reclaim of it recorded)
            await api.stop("erin")
            await until(lambda: all(u in events.gone for u in (f"jupyter-{u}" for u in GPU_USERS)),
                        OPTIONS["idle_reclaim_after"] + 90, "the four reclaimed and their pods gone")
            with Store.open(hub.info["store"]) as store:
                await until(lambda: all(r.outcome for r in store.reclaims()), 30, "the stops finished")
                records = {r.session.split("/")[0]: r for r in store.reclaims()}
            yield api, events, records
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


def stop_to_gone(events: PodEvents, record) -> float:
    return events.gone[f"jupyter-{record.session.split('/')[0]}"] - record.t.timestamp()


async def test_the_reclaim_gives_the_pods_its_grace_period_and_a_users_own_stop_does_not(scene):
    _, events, records = scene
    assert set(records) == set(GPU_USERS)  # erin's stop is not a reclaim
    assert all(r.outcome == "stopped" and r.gpus == 1 for r in records.values()), records
    assert {user: events.deleting[f"jupyter-{user}"][1] for user in (*GPU_USERS, "erin")} == {
        **{user: GRACE for user in GPU_USERS}, "erin": 1}


async def test_a_checkpoint_registered_with_on_reclaim_or_atexit_is_saved_into_home(scene, sim):
    for user in ("alice", "bob"):
        saved = json.loads((home(sim, user) / "checkpoint.json").read_text())
        assert saved == {"epoch": 7, "weights": [0.25, 1.5], "user": user}
    # erin's own stop gave her kernel the plain 1 s (the kubelet's 2 s): no checkpoint
    assert not (home(sim, "erin") / "checkpoint.json").exists()


async def test_a_hanging_forking_callback_registered_ten_thousand_times_is_bounded(scene, sim):
    _, events, records = scene
    assert (home(sim, "carol") / "count.txt").read_text() == "ran\n"
    # SIGTERM to the kernel at the deadline, GRACE - MARGIN after the stop began; the server
    # then exits, well before the kubelet's SIGKILL at GRACE
    assert GRACE - MARGIN - 1 < stop_to_gone(events, records["carol"]) < GRACE + 5
    metrics = gpu_pods(sim)
    assert not [user for user in GPU_USERS if f'pod="jupyter-{user}"' in metrics], metrics


async def test_a_server_that_exits_at_once_is_not_slowed(scene):
    _, events, records = scene
    # saved in 5 s, or nothing to save: each pod goes when its processes have exited
    assert stop_to_gone(events, records["dave"]) < GRACE - MARGIN - 1
    assert 5 < stop_to_gone(events, records["alice"]) < GRACE - MARGIN - 1
    times = {user: round(stop_to_gone(events, records[user]), 1) for user in GPU_USERS}
    erin = events.gone["jupyter-erin"] - events.deleting["jupyter-erin"][0]
    print(f"\nstop request to pod gone (s), grace {GRACE} s: {times}; erin's own stop, "
          f"deletion to pod gone: {erin:.1f} s; at {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
