"""The service end to end: a real JupyterHub runs jupyterhub-gpu-reclaim as a managed
service (minimal role, short timings) over KubeSpawner on the simulated cluster, whose
four GPUs are all taken while a fifth user waits for one.

- alice (1 GPU, never used, a browser tab polling her server) is warned, then reclaimed,
  and the freed GPU lets frank's waiting spawn proceed;
- carol (1 GPU training, no hub activity) is kept although idle-culler would cull her;
- dave (1 GPU idle, a cell running) is kept: a busy kernel is work;
- erin (1 GPU idle, "keep alive until" declared) is kept;
- bob (no GPU, no activity) is culled at the timeout, as idle-culler culls him.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.hubapi import HubAPI
from ..support.pods import pod_phase
from ..support.service_hub import TIMINGS, latest_rule, metric, metrics, start_service_hub, until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

UTC = dt.timezone.utc
# shorter than TIMINGS: alice's reclaim ends the scene; carol and dave start their work once
# the four are ready, well before 20 s (the timings themselves: tests/service/test_service.py)
# --max-keepalive 2 h: the spawner, linked to the service, caps the spawn form's keep-alive at it
OPTIONS = {**TIMINGS, "never_used_warn_after": 20, "never_used_reclaim_after": 30, "timeout": 20,
           "max_keepalive": 7200}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    child = start_service_hub(tmp_path_factory.mktemp("hub"), sim, webhook, **OPTIONS)
    yield child
    child.stop(grace=60)




@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub, sim, webhook):
    """Sets the scene once; yields (api, what happened), then stops every server."""
    tasks: list[asyncio.Task] = []
    async with HubAPI.of(hub) as api:
        try:
            # the four GPUs: carol trains, dave runs a cell, erin declares an intent; bob has no GPU
            for user, profile in (("carol", "gpu-1"), ("dave", "gpu-1"), ("erin", "gpu-1"), ("bob", "cpu")):
                await api.start(user, profile)
            await asyncio.gather(*(api.wait_ready(u) for u in ("carol", "dave", "erin", "bob")))
            await api.run_code("carol", "from gpu_reclaim_sim.gpu import use_gpu; "
                                        "use_gpu(percent=85, seconds=900, block=False)")
            # dave's cell uses the GPU a little, then runs on without it (a busy kernel after
            # GPU use is work; CPU work on a GPU nothing ran on would not be)
            tasks.append(asyncio.create_task(api.run_code(
                "dave", "from gpu_reclaim_sim.gpu import use_gpu; use_gpu(percent=60, seconds=15); "
                        "import time; time.sleep(900)", timeout=1000)))
            now = dt.datetime.now(UTC)
            with Store.open(hub.info["store"]) as store:
                store.set_intent("erin/", until=now + dt.timedelta(minutes=10), set_at=now, by="erin")

            # alice takes the last GPU and leaves a tab open that polls her server
            await api.start("alice", "gpu-1")
            await api.wait_ready("alice")

            async def open_tab():
                while True:
                    async with api.session.get(f"{api.url}/user/alice/api/status") as r:
                        await r.read()
                    await asyncio.sleep(2)

            tasks.append(asyncio.create_task(open_tab()))
            # frank waits for a GPU; his spawn page's messages are read as the page reads them
            await api.start("frank", "gpu-1")
            frank_progress = asyncio.create_task(api.progress("frank", timeout=300))
            await until(lambda: pod_phase(sim, "jupyter-frank") == "Unschedulable", 30, "frank's pod waits for a GPU")
            frank_waited_at = dt.datetime.now(UTC)

            # alice: warned, then reclaimed; frank's spawn proceeds on her GPU
            limit = OPTIONS["never_used_reclaim_after"] + 60
            await until(lambda: webhook.events("alice/", "reclaim"), limit, "alice's reclaim notice")
            tasks[-1].cancel()
            frank = await api.wait_ready("frank", timeout=120)
            progress = [e.get("message", "") for e in await frank_progress]
            yield api, {"frank_waited_at": frank_waited_at, "frank": frank, "frank_progress": progress}
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_idle_gpu_with_an_open_tab_is_warned_then_reclaimed(hub, sim, scene, webhook):
    api, _ = scene
    warning, = webhook.events("alice/", "warning")
    reclaim, = webhook.events("alice/", "reclaim")
    # the warning: who, the rule and its evidence, when, how to keep it, to alice and the admins
    assert warning["rule"] == "gpu-never-used" and warning["recipients"] == ["alice", "admin"]
    assert warning["evidence"]["never_used"] is True and warning["evidence"]["latest_util"] == [0.0]
    assert warning["keepalive_url"] == "/services/gpu-reclaim/keepalive?session=alice%2F"
    assert warning["hub"] == "Test Hub" and not warning["dry_run"]
    assert "keep" in warning["text"].lower() and "/tmp" in warning["text"]
    # stopped through the hub, no earlier than warning_lead after the warning; pod and GPU gone
    assert await api.server("alice") is None
    assert pod_phase(sim, "jupyter-alice") is None
    with Store.open(hub.info["store"]) as store:
        record, = [r for r in store.reclaims() if r.session == "alice/"]
    assert record.outcome == "stopped" and record.rule == "gpu-never-used" and record.gpus == 1
    warned_at = parse_time(warning["evidence"]["idle_since"])
    assert record.t >= warned_at + dt.timedelta(seconds=OPTIONS["never_used_reclaim_after"])
    # the open tab kept the hub's last_activity fresh the whole time: it did not save her
    hub_activity = parse_time(record.evidence["hub_last_activity"])
    assert record.t - hub_activity < dt.timedelta(seconds=15)


async def test_the_freed_gpu_lets_the_waiting_spawn_proceed(scene):
    api, seen = scene
    assert seen["frank"]["ready"]
    assert parse_time(seen["frank"]["started"]) <= seen["frank_waited_at"]
    # while he waited, his spawn page said so; once alice was warned, when her GPU was due
    waits = [m for m in seen["frank_progress"] if m.startswith("Waiting for a free GPU (1 GPU requested")]
    assert waits and "expected to be free" not in waits[0], seen["frank_progress"]
    assert any(re.search(r"; a GPU is expected to be free in about \d+ (s|min)$", m) for m in waits), waits


async def test_busy_gpu_with_stale_hub_activity_is_kept(hub, scene):
    api, _ = scene
    server = await api.server("carol")
    assert server and server["ready"]
    inactive = dt.datetime.now(UTC) - parse_time(server["last_activity"])
    assert inactive > dt.timedelta(seconds=OPTIONS["timeout"]), "idle-culler would have culled carol"
    assert latest_rule(hub, "carol/") == ("keep", "gpu-active")


async def test_busy_kernel_is_kept(hub, scene):
    api, _ = scene
    assert (await api.server("dave"))["ready"]
    assert latest_rule(hub, "dave/") == ("keep", "kernel-busy")


async def test_intent_is_honoured(hub, scene):
    api, _ = scene
    assert (await api.server("erin"))["ready"]
    assert latest_rule(hub, "erin/") == ("keep", "intent")
    started = parse_time((await api.server("erin"))["started"])
    assert dt.datetime.now(UTC) - started > dt.timedelta(seconds=OPTIONS["never_used_reclaim_after"])


async def test_server_without_gpu_is_culled_like_idle_culler(hub, scene, webhook):
    api, _ = scene
    await until(lambda: _gone(api, "bob"), 60, "bob culled")
    with Store.open(hub.info["store"]) as store:
        record, = [r for r in store.reclaims() if r.session == "bob/"]
    assert record.rule == "idle-culler-timeout" and record.outcome == "stopped" and record.gpus == 0
    assert record.evidence["inactive_s"] >= OPTIONS["timeout"]
    assert not webhook.events("bob/")  # idle-culler sends no notices; neither do we for CPU servers


async def _gone(api: HubAPI, user: str) -> bool:
    return await api.server(user) is None


async def test_metrics_count_what_happened(hub, scene):
    values = metrics(hub)
    name = "jupyterhub_gpu_reclaim"
    assert metric(values, f"{name}_warnings_total", rule="gpu-never-used") >= 1
    assert metric(values, f"{name}_reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    assert metric(values, f"{name}_dry_run") == 0
    assert metric(values, f"{name}_cycle_duration_seconds_count") > 5
    assert metric(values, f"{name}_sessions", gpu="true", action="keep", rule="intent") == 1


async def test_reclaims_api_and_resume_priority(hub, sim, scene):
    """The service tells a hub-authenticated caller a user's reclaims; GPUReclaimSpawner
    uses that to give alice's next pod the resume priority class (queue first, no
    preemption: everyone else keeps their GPU)."""
    api, _ = scene
    url = f"{hub.info['url']}/services/gpu-reclaim/api/reclaims?user=alice"
    async with api.session.get(url) as r:  # the tests' token: access:services
        assert r.status == 200
        reclaims = (await r.json())["reclaims"]
    assert [(x["session"], x["rule"], x["outcome"], x["gpus"]) for x in reclaims] == [
        ("alice/", "gpu-never-used", "stopped", 1)]
    import aiohttp
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(url) as r:
            assert r.status == 403

    await api.start("alice", "gpu-1")
    await until(lambda: pod_phase(sim, "jupyter-alice") == "Unschedulable", 30, "alice's new pod waits")
    pod = json.loads(subprocess.run(
        [str(Path(sys.executable).with_name("kubectl")), "--kubeconfig", sim.info["kubeconfig"], "get", "pod",
         "-n", "jhub", "jupyter-alice", "-o", "json"], check=True, capture_output=True, text=True).stdout)
    assert pod["spec"]["priorityClassName"] == "jhub-resume-priority" and pod["spec"]["priority"] == 10
    assert pod["spec"]["preemptionPolicy"] == "Never"
    # it may not preempt, so no node can take it now: image locality only prefers
    assert re.search(r"image locality for alice .*: prefer - 2 node\(s\) hold the image, 0 can take",
                     hub.log_path.read_text())
    for user in ("carol", "dave", "erin", "frank"):
        assert (await api.server(user))["ready"]  # nobody was preempted
    await api.stop("carol")  # a GPU frees up: alice gets it
    await api.wait_ready("alice", timeout=120)


async def test_the_spawner_caps_a_keep_alive_at_the_services_max_keepalive(hub, scene):
    """The longest keep-alive has one source, the service's --max-keepalive (2 h here): the
    spawner asks the service for it, so a spawn asking 3 h is refused with the service's cap,
    and nothing starts."""
    api, _ = scene
    user = "gina"
    await api.ensure_user(user)
    later = (dt.datetime.now(UTC) + dt.timedelta(hours=3)).isoformat()
    async with api.session.post(f"{api.api}/users/{user}/server", json={"profile": "cpu", "keepalive_until": later}) as r:
        answer = await r.text()
    assert r.status in (201, 202, 400), answer  # a hub that waits for the spawn answers 400
    if r.status != 400:  # the spawn failed: the reason is what the spawn page shows
        events = await api.progress(user, timeout=30)
        assert events[-1].get("failed"), events
        answer = events[-1]["message"]
    assert "at most 2 hours from now" in answer, answer

    async def gone():
        return await api.server(user) is None
    await until(gone, 30, "gina's refused spawn gone")
