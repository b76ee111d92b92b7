"""The signals against the real things: JupyterHub + KubeSpawner on the simulated
cluster, its dcgm-exporter endpoint, and real single-user servers and kernels.

One hub for the whole module, with activity intervals of 2 s (jupyterhub_config_activity.py),
and three servers started once: alice (1 GPU), bob and carol (CPU)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from jupyterhub_gpu_reclaim.signals.dcgm import DcgmScrapeSignal
from jupyterhub_gpu_reclaim.signals.hub import HubSignal
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal
from jupyterhub_gpu_reclaim.signals.prometheus import DEFAULT_QUERY, PrometheusSignal
from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.live import hub_fixture
from ..support.prometheus import running_prometheus
from ..support.hubapi import HubAPI, StaticProbeToken

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
USERS = {"alice": "gpu-1", "bob": "cpu", "carol": "cpu"}


INTERVAL = 2  # s: the hub's and the servers' activity intervals (JupyterHub's defaults: 300/60)


# conftest's hub with INTERVAL activity intervals
hub = hub_fixture(HERE / "jupyterhub_config_activity.py", {"GPU_RECLAIM_ACTIVITY_INTERVAL": str(INTERVAL)})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(hub):
    """The three users' servers, started once for the module and stopped at its end."""
    async with HubAPI.of(hub) as client:
        await asyncio.gather(*(client.start(u, p) for u, p in USERS.items()))
        await asyncio.gather(*(client.wait_ready(u) for u in USERS))
        yield client


def pod_url(sim, name: str) -> str:
    """The server's own address, as KubeSpawner computes it: http://{podIP}:{notebook-port}."""
    kubectl = Path(sys.executable).with_name("kubectl")
    out = subprocess.run([str(kubectl), "--kubeconfig", sim.info["kubeconfig"], "get", "pod", "-n", "jhub",
                          name, "-o", "json"], check=True, capture_output=True, text=True, timeout=30).stdout
    pod = json.loads(out)
    port = next(p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])
                if p.get("name") == "notebook-port")
    return f"http://{pod['status']['podIP']}:{port}"


@pytest.mark.hub_contract
async def test_hub_lists_ready_servers_page_by_page(hub, servers):
    before = {name: await _last_activity(servers, name) for name in USERS}
    async with HubSignal(hub.info["url"] + "/hub/api", hub.info["token"], page_size=1) as signal:
        listed = await signal.ready_servers()
        assert signal.requests == 3  # one page per user (no version request: the hub is 5 or later)
    by_user = {s.user: s for s in listed}
    assert set(by_user) == set(USERS)
    for name, s in by_user.items():
        model = (await servers.user(name))["servers"][""]  # after: last_activity may have moved
        assert s.name == "" and s.session_id == f"{name}/"
        assert s.ready and s.pending is None and s.url == f"/user/{name}/"
        assert s.user_options == {"profile": USERS[name]}
        assert s.started is not None and s.started.tzinfo is not None
        assert s.last_activity is not None and s.user_last_activity is not None
        assert before[name] <= s.last_activity <= parse_time(model["last_activity"])
        assert s.last_activity >= s.started
        assert not s.admin and s.groups == ()


async def test_dcgm_scrape_shows_the_gpu_pod_idle_then_loaded(sim, servers):
    async with DcgmScrapeSignal([sim.info["metrics"]], timeout=5) as dcgm:
        before = (await dcgm.utilization())[("jhub", "jupyter-alice")]
        assert before.util == (0.0,) and len(before.fb_used_mib) == 1
        assert ("jhub", "jupyter-bob") not in await dcgm.utilization()  # no GPU, no reading
        await servers.run_code("alice", "from gpu_reclaim_sim.gpu import use_gpu; "
                                        "use_gpu(percent=75, seconds=60, block=False)")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = (await dcgm.utilization())[("jhub", "jupyter-alice")]
            if after.util == (75.0,):
                break
            await asyncio.sleep(0.5)
        assert after.util == (75.0,) and after.fb_used_mib[0] > 0 and after.t > before.t


@pytest.fixture(scope="module")
def prometheus(sim, tmp_path_factory):
    """Debian's Prometheus scraping the simulated dcgm-exporter every second, with the
    exporter's address labelled as Kubernetes service discovery would (pod, namespace), so
    the default honor_labels: false renames the exporter's labels to exported_*."""
    target = urllib.parse.urlsplit(sim.info["metrics"])
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "dcgm", "metrics_path": target.path,
                                  "static_configs": [{"targets": [target.netloc], "labels": {
                                      "pod": "dcgm-exporter-sim", "namespace": "gpu-operator"}}]}]}
    with running_prometheus(config, tmp_path_factory.mktemp("prometheus")) as url:
        yield url


async def test_prometheus_one_query_sees_the_loaded_gpu(prometheus, servers):
    """Runs after the dcgm test, while alice's GPU is still at 75 % for a minute."""
    async with PrometheusSignal(prometheus, timeout=5) as prom:
        deadline = time.monotonic() + 15
        readings: dict = {}
        while time.monotonic() < deadline:
            readings = await prom.utilization()
            if readings.get(("jhub", "jupyter-alice")) and readings[("jhub", "jupyter-alice")].util == (75.0,):
                break
            await asyncio.sleep(0.5)
        alice = readings[("jhub", "jupyter-alice")]
        assert alice.util == (75.0,) and alice.fb_used_mib[0] > 0
        assert set(readings) == {("jhub", "jupyter-alice")}  # not the exporter's own pod
    # each metric once per GPU, in its own field (gpu_readings decides which is the utilization)
    async with aiohttp.ClientSession() as s:
        async with s.get(prometheus + "/api/v1/query", params={"query": DEFAULT_QUERY}) as r:
            result = (await r.json())["data"]["result"]
    mine = [x["metric"] for x in result if x["metric"].get("exported_pod") == "jupyter-alice"]
    assert sorted(m["field"] for m in mine) == ["engine", "fb_used", "util"]
    assert all(m["pod"] == "dcgm-exporter-sim" for m in mine)


async def test_kernel_probe_sees_a_busy_kernel(hub, servers):
    async with KernelSignal(StaticProbeToken(hub.info["token"]), timeout=5) as ks:
        cell = asyncio.create_task(servers.run_code("carol", "import time; time.sleep(8)"))
        states: list[str] = []
        # the cell is busy for 8 s once its kernel has started, which under load takes more
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "busy" not in states:
            kernels, terminals = await ks.probe("carol", "", "/user/carol/", hub.info["url"])
            states = [k.execution_state for k in kernels]
            await asyncio.sleep(0.3)
        assert states == ["busy"] and terminals == []
        assert kernels[0].last_activity is not None
        await cell
        kernels, _ = await ks.probe("carol", "", "/user/carol/", hub.info["url"])
        assert all(k.execution_state != "busy" for k in kernels)


async def _last_activity(api: HubAPI, user: str):
    return parse_time((await api.user(user))["servers"][""]["last_activity"])


async def _settled(api: HubAPI, user: str, quiet: float = INTERVAL + 1, limit: float = 30.0) -> object:
    """The user's last_activity once it has stopped moving for more than one interval."""
    deadline = time.monotonic() + limit
    last = await _last_activity(api, user)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        now = await _last_activity(api, user)
        if now == last:
            return now
        last = now
    raise AssertionError(f"{user}'s last_activity kept moving: {last}")


# long enough for the server's push and the hub's pull of the proxy's, with time to spare
UNCHANGED = 2 * INTERVAL + 2


async def _changed(api: HubAPI, user: str, since, limit: float = 12.0):
    """The user's last_activity once it differs from `since`; `since` if it did not within
    `limit`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        now = await _last_activity(api, user)
        if now != since:
            return now
        await asyncio.sleep(0.5)
    return since


async def test_kernel_probes_do_not_move_last_activity(sim, hub, servers):
    """Probes with ?no_track_activity=1 to the server's own address leave the hub's
    last_activity alone; the same request without the flag moves it; and so does a
    flagged probe through configurable-http-proxy (which counts every request)."""
    direct = pod_url(sim, "jupyter-bob")
    token = hub.info["token"]
    before = await _settled(servers, "bob")
    async with KernelSignal(StaticProbeToken(token), timeout=5) as ks:
        # 1. flagged probes, direct: several over more than two activity intervals
        for _ in range(2 * INTERVAL + 1):
            assert await ks.probe("bob", "", "/user/bob/", direct_url=direct) == ([], [])
            await asyncio.sleep(1)
        assert await _last_activity(servers, "bob") == before

        # 2. control: the same request without the flag is activity, reported within ~5 s
        async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"}) as s:
            async with s.get(f"{direct}/user/bob/api/kernels") as r:
                assert r.status == 200
        moved = await _changed(servers, "bob", before)
        assert moved > before, "a request without no_track_activity should count as activity"

        # 3. a flagged probe through the proxy still counts: CHP records every request
        settled = await _settled(servers, "bob")
        await ks.probe("bob", "", "/user/bob/", hub.info["url"])
        via_proxy = await _changed(servers, "bob", settled)
        assert via_proxy > settled


async def test_anonymous_requests_with_a_body_move_last_activity(servers):
    """What docs/security.md says of the network (issue 27, finding 8), checked against the
    real proxy: configurable-http-proxy counts a request's body as activity whatever the
    server answers, so an anonymous POST that carol's server refuses (403) moves her
    server's last_activity in the hub; an anonymous GET, refused or redirected to the login,
    does not (CHP counts a bodiless request only when answered below 300)."""
    url = servers.url
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as anonymous:
        before = await _settled(servers, "carol")
        for path in ("/user/carol/api/contents", "/user/carol/lab"):
            async with anonymous.get(url + path, allow_redirects=False) as r:
                assert r.status in (302, 403), (path, r.status)
        assert await _changed(servers, "carol", before, limit=UNCHANGED) == before
        async with anonymous.post(url + "/user/carol/api/contents", data=b"x" * 64, allow_redirects=False) as r:
            assert r.status == 403
        moved = await _changed(servers, "carol", before)
    assert moved > before, "an anonymous POST answered 403 no longer moves last_activity: correct docs/security.md"


async def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


async def test_pod_watch_tracks_gpus_and_the_gpu_queue(sim, servers):
    """alice holds 1 of the cluster's 4 GPUs; dave and erin ask for 2 each, so one of them
    waits (Unschedulable for nvidia.com/gpu) until dave's server stops."""
    from jupyterhub_gpu_reclaim.signals.pods import PodSignal
    signal = PodSignal("jhub", kubeconfig=sim.info["kubeconfig"], watch_timeout=5)
    await signal.start()
    try:
        sessions = signal.snapshot(60).by_session
        alice, bob = sessions["alice/"], sessions["bob/"]
        assert alice.gpus == 1 and alice.ready and alice.node and alice.direct_url
        assert bob.gpus == 0 and signal.snapshot(60).pending_gpus == 0
        await servers.start("dave", "gpu-2")
        await servers.wait_ready("dave")
        await servers.start("erin", "gpu-2")
        await _until(lambda: signal.snapshot(60).pending_gpus == 2, 20, "erin's 2 GPUs pending")
        erin = signal.snapshot(60).by_session["erin/"]
        assert erin.waits_for_gpu and not erin.ready and "nvidia.com/gpu" in erin.unschedulable
        await servers.stop("dave")
        await _until(lambda: "dave/" not in signal.snapshot(60).by_session, 20, "dave's pod gone from the watch")
        await _until(lambda: signal.snapshot(60).pending_gpus == 0, 30, "erin scheduled")
        await servers.wait_ready("erin")
        await _until(lambda: signal.snapshot(60).by_session["erin/"].ready, 10, "erin ready in the watch")
    finally:
        await signal.stop()
