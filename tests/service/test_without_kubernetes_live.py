"""On a real JupyterHub without Kubernetes (SimpleLocalProcessSpawner: each server a local
jupyterhub-singleuser process, no cluster anywhere):

- the service registered exactly as this repository's README registers it (short
  --timeout/--cull-every for the test) culls an idle server within timeout + cull-every
  and keeps an active one;
- side by side on one hub, the real jupyterhub-idle-culler 2.0 and the service, each
  started as 2.0 is started (`--config=idle_culler_config.py`, a 2.0 config file with
  c.IdleCuller.timeout, cull_every and idle-culler's documented cull_arbiter_hook), cull
  the same servers.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gpu_reclaim_sim.launch import free_port, start_hub
from gpu_reclaim_sim.paths import REPO
from jupyterhub_gpu_reclaim.store import Store

from ..support import live
from ..support.hubapi import HubAPI
from ..support.service_hub import until
from ..support.store_reads import decisions_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
UTC = dt.timezone.utc
TIMEOUT, CULL_EVERY = 20, 3
# idle-culler 2.0's config file: its settings and the hook its cull_arbiter_hook help documents
CULLER_CONFIG = """
c.IdleCuller.timeout = 12
c.IdleCuller.cull_every = 3

def my_cull_arbiter(inactive, inactive_limit, server):
    if server['state']['profile_name'] == 'unlimited':
        return False
    return inactive.total_seconds() >= inactive_limit
c.IdleCuller.cull_arbiter_hook = my_cull_arbiter
"""


def start_local_hub(workdir: Path, **env: str):
    """The hub without Kubernetes (jupyterhub_config_local.py), and the tests' token."""
    token = secrets.token_hex(16)
    child = start_hub(workdir, HERE / "jupyterhub_config_local.py", "", python=live.HUB_PYTHON,
                      port=free_port(), env={"GPU_RECLAIM_TEST_TOKEN": token, "GPU_RECLAIM_REPO": str(REPO),
                                             "GPU_RECLAIM_DEMO_PASSWORD": "test-password",
                                             "GPU_RECLAIM_SINGLEUSER": str(Path(sys.executable).with_name(
                                                 "jupyterhub-singleuser")), **env})
    child.info["token"] = token
    return child


def cycles_begun(hub, service: str) -> int:
    """How many cycles `service` has begun, as the hub logged them: each begins with a
    `GET /hub/api/users?...` (one page: these hubs have four users at most)."""
    log = hub.log_path.read_text(errors="replace")
    return len(re.findall(rf" GET /hub/api/users\?\S* \({re.escape(service)}@", log))


async def more_cycles(hub, service: str, n: int = 2) -> None:
    """Until `service` has begun `n` more cycles than now."""
    start = cycles_begun(hub, service)
    await until(lambda: cycles_begun(hub, service) >= start + n, 60, f"{n} more cycles of {service}")


async def start(api: HubAPI, user: str, name: str = "", profile: str = "small") -> None:
    await api.ensure_user(user)
    path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
    await api.request("POST", path, {"profile": profile})


async def running(api: HubAPI) -> set[str]:
    """The ready servers, "user/name"."""
    users = await api.request("GET", "/users?state=ready")
    return {f"{u['name']}/{name}" for u in users for name, s in u["servers"].items() if s["ready"]}


async def keep_active(api: HubAPI, user: str, stop: asyncio.Event) -> None:
    """What a busy server reports: its activity, every 2 s (as jupyterhub-singleuser posts it)."""
    while not stop.is_set():
        now = dt.datetime.now(UTC).isoformat().replace("+00:00", "Z")
        await api.request("POST", f"/users/{user}/activity", {"servers": {"": {"last_activity": now}}})
        try:
            await asyncio.wait_for(stop.wait(), 2)
        except asyncio.TimeoutError:
            pass


async def test_the_readmes_registration_culls_an_idle_server_and_keeps_an_active_one(tmp_path):
    flags = json.dumps([f"--timeout={TIMEOUT}", f"--cull-every={CULL_EVERY}"])
    hub = start_local_hub(tmp_path / "hub", GPU_RECLAIM_REGISTRATION="ours", GPU_RECLAIM_SERVICE_FLAGS=flags,
                          GPU_RECLAIM_SERVICE_PORT=str(free_port()))
    stop = asyncio.Event()
    try:
        async with HubAPI.of(hub) as api:
            await start(api, "alice")
            await start(api, "bob")
            await until(lambda: _ready(api, {"alice/", "bob/"}), 120, "both servers ready")
            active = asyncio.create_task(keep_active(api, "bob", stop))
            await until(lambda: _gone(api, "alice/"), TIMEOUT + CULL_EVERY + 60, "alice's idle server culled")
            # bob's server started with alice's: two more cycles, and it had every chance to be culled
            await more_cycles(hub, "gpu-reclaim")
            assert "bob/" in await running(api)
            stop.set()
            await active
        log = hub.log_path.read_text(errors="replace")
        assert "no Kubernetes (not in a pod, no --kubeconfig" in log, log[-3000:]
        assert "reclaim alice (idle-culler-timeout)" in log and "reclaim bob " not in log
        assert "signal pods failed" not in log and "pod-missing" not in log
        with Store.open(f"sqlite:///{tmp_path / 'hub' / 'gpu_reclaim.sqlite'}") as store:
            (t, culled), = [(t, d) for t, d in decisions_of(store, "alice/") if d.action == "reclaim"]
            kept = {(d.action, d.rule) for _, d in decisions_of(store, "bob/")}
        # culled at the first cycle after it was due: within timeout + cull-every of its last activity
        assert TIMEOUT <= culled.evidence["inactive_s"] < TIMEOUT + CULL_EVERY + 2, culled.evidence  # 2: the cycle's own time
        assert kept == {("keep", "idle-culler")}
    finally:
        stop.set()
        hub.stop(grace=60)


async def _ready(api: HubAPI, servers: set[str]) -> bool:
    return servers <= await running(api)


async def _gone(api: HubAPI, server: str) -> bool:
    return server not in await running(api)


def run_culler(module: str, workdir: Path, hub, token: str) -> subprocess.Popen:
    """A culler as 2.0 is started (`python -m MODULE --config=idle_culler_config.py`), from
    this environment, with only what a hub-managed service gets: no Kubernetes anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KUBE"))}
    env.update(JUPYTERHUB_API_TOKEN=token, JUPYTERHUB_API_URL=f"{hub.info['url']}/hub/api", PYTHONUNBUFFERED="1")
    log = open(workdir / f"{module}.log", "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", module, "--config=idle_culler_config.py"], cwd=workdir,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


@pytest.mark.jupyterhub(6, reason="both cullers read the same hub API on either major; once is enough for "
                                   "the suite's time (the README's registration runs on both)")
async def test_side_by_side_with_idle_culler_2_0_the_same_servers_are_culled(tmp_path):
    tokens = {"idle-culler": secrets.token_hex(16), "gpu-reclaim": secrets.token_hex(16)}
    hub = start_local_hub(tmp_path / "hub", GPU_RECLAIM_EXTERNAL=json.dumps(tokens))
    workdir = tmp_path / "culler"
    workdir.mkdir()
    (workdir / "idle_culler_config.py").write_text(CULLER_CONFIG)
    servers = {"alice/": ("alice", "", "small"), "alice/lab": ("alice", "lab", "small"),
               "bob/": ("bob", "", "unlimited"), "carol/": ("carol", "", "small")}
    culled: dict[str, set[str]] = {}
    stop = asyncio.Event()
    try:
        async with HubAPI.of(hub) as api:
            active = asyncio.create_task(keep_active(api, "carol", stop))  # carol works; the others are idle
            for module, service in (("jupyterhub_idle_culler", "idle-culler"), ("jupyterhub_gpu_reclaim", "gpu-reclaim")):
                for sid, (user, name, profile) in servers.items():
                    if sid not in await running(api):
                        await start(api, user, name, profile)
                await until(lambda: _ready(api, set(servers)), 120, "every server ready")
                proc = run_culler(module, workdir, hub, tokens[service])
                try:
                    await until(lambda: _none_of(api, {"alice/", "alice/lab"}), 120, f"{module}: the idle servers culled")
                    # the others are as old as alice's (started with them, or in the round
                    # before): two more cycles, and they had every chance
                    await more_cycles(hub, service)
                    assert proc.poll() is None, (workdir / f"{module}.log").read_text()[-3000:]
                finally:
                    proc.terminate()
                    proc.wait(30)
                culled[module] = set(servers) - await running(api)
            stop.set()
            await active
        assert culled["jupyterhub_gpu_reclaim"] == culled["jupyterhub_idle_culler"] == {"alice/", "alice/lab"}, culled
        ours = (workdir / "jupyterhub_gpu_reclaim.log").read_text(errors="replace")
        assert "no Kubernetes" in ours and "Traceback" not in ours, ours[-3000:]
        assert "timeout = 12" in ours and "cull_every = 3" in ours  # its settings, as the file gives them
    finally:
        stop.set()
        hub.stop(grace=60)


async def _none_of(api: HubAPI, gone: set[str]) -> bool:
    return not gone & await running(api)


# a cull_arbiter_hook that hangs (synchronously: time.sleep) for bob's server and raises
# SystemExit for carol's; idle-culler's rule for the others
HOOK_CONFIG = """
import time
c.GpuReclaim.timeout = 12
c.GpuReclaim.cull_every = 3
c.GpuReclaim.cull_arbiter_timeout = 2
c.GpuReclaim.bind_url = "http://127.0.0.1:{port}"

def hook(inactive, inactive_limit, server):
    if server["url"].startswith("/user/bob/"):
        time.sleep(3600)
    if server["url"].startswith("/user/carol/"):
        raise SystemExit("carol's hook")
    return inactive.total_seconds() >= inactive_limit
c.GpuReclaim.cull_arbiter_hook = hook
"""


@pytest.mark.jupyterhub(6, reason="the hook runs in the service, whatever the hub's major; once is enough "
                                   "for the suite's time")
async def test_a_hook_that_hangs_or_exits_holds_its_own_server_only(tmp_path):
    token, port = secrets.token_hex(16), free_port()
    hub = start_local_hub(tmp_path / "hub", GPU_RECLAIM_EXTERNAL=json.dumps({"gpu-reclaim": token}))
    workdir = tmp_path / "service"
    workdir.mkdir()
    (workdir / "idle_culler_config.py").write_text(HOOK_CONFIG.format(port=port))
    log_path = workdir / "jupyterhub_gpu_reclaim.log"
    try:
        async with HubAPI.of(hub) as api:
            for user in ("alice", "bob", "carol"):
                await start(api, user)
            await until(lambda: _ready(api, {"alice/", "bob/", "carol/"}), 120, "every server ready")
            proc = run_culler("jupyterhub_gpu_reclaim", workdir, hub, token)
            try:
                await until(lambda: "server bob kept" in log_path.read_text(errors="replace"), 60,
                            "bob's hook given up on")
                # bob's hook sleeps in its thread: the pages answer, alice's idle server is culled
                async with aiohttp.ClientSession() as http:
                    for _ in range(5):
                        async with asyncio.timeout(5), http.get(f"http://127.0.0.1:{port}/health") as r:
                            assert r.status == 200
                await until(lambda: _gone(api, "alice/"), 60, "alice's idle server culled")
                await more_cycles(hub, "gpu-reclaim")
                assert proc.poll() is None, log_path.read_text()[-3000:]  # carol's SystemExit did not end it
                assert {"bob/", "carol/"} <= await running(api)
            finally:
                proc.terminate()
                try:
                    proc.wait(30)  # bob's thread still sleeps: a daemon, it does not keep the service from exiting
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise
        log = log_path.read_text(errors="replace")
        assert "server bob kept: the cull_arbiter_hook did not answer within 2 s" in log, log[-3000:]
        assert "server bob kept: the cull_arbiter_hook's call for this server in an earlier cycle is still running" in log
        assert "server carol kept: the cull_arbiter_hook raised SystemExit: carol's hook" in log
        assert log.count("server carol kept") == 1 and "reclaim alice (idle-culler-timeout)" in log
    finally:
        hub.stop(grace=60)
