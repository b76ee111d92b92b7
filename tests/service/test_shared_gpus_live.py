"""MIG and time-sliced sessions end to end: a real JupyterHub runs jupyterhub-gpu-reclaim
as a managed service over KubeSpawner (GPUReclaimSpawner) on a simulated cluster with one
A100 cut into two MIG 1g.10gb instances and one T4 that two pods share by time-slicing
(`nvidia.com/gpu` replicas, the exporter's default labelling: one series for the device,
labelled with one of its pods). Real servers and kernels; `use_gpu` in a kernel drives the
simulated GPU.

- mia (MIG, never used) is warned, then reclaimed on her own instance's
  DCGM_FI_PROF_GR_ENGINE_ACTIVE, while max's kernel keeps his instance of the same GPU busy
  (kept); nia, waiting for an instance meanwhile, is told so and gets mia's;
- tom and tia share the T4: tom's kernel trains (kept, `kernel-busy`), tia's kernel is idle
  (warned and reclaimed, `shared-gpu-idle-kernels`, `gpu_shared`) although the device's one
  series, labelled with her pod, shows tom's work; tom, who has no series, is never held
  or reclaimed for it;
- the admin data shows each session's GPU type, whether it is shared, and its GPUs by kind
  ("1 MIG slice"), as the waiting lines name them;
- the admin headline and the spawn form count MIG slices and shared GPUs, each by its name.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest
import pytest_asyncio
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim.launch import start_sim
from jupyterhub_gpu_reclaim.store import Store

from ..support.hubapi import HubAPI
from ..support.web_client import PREFIX, Client
from ..support.service_hub import HERE, start_service_hub, until
from ..support.shared_gpu_nodes import A100, T4, shared_gpus_scenario
from ..support.store_reads import decisions_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NS = "jhub"
# seconds: long enough for a kernel to start its work after its server is ready
OPTIONS = {"never_used_warn_after": 18, "never_used_reclaim_after": 28,
           "idle_warn_after": 18, "idle_reclaim_after": 28, "warning_lead": 10, "stale_after": 10}
TRAIN = "from gpu_reclaim_sim.gpu import use_gpu; use_gpu(percent=90, seconds=900, block={block})"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The demo's cluster (images, priority classes) with only the two shared GPU nodes."""
    workdir = tmp_path_factory.mktemp("sim")
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(shared_gpus_scenario("shared-gpus-live")))
    child = start_sim(workdir, path)
    yield child
    child.stop()


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    child = start_service_hub(tmp_path_factory.mktemp("hub"), sim, webhook,
                              hub_config=HERE / "jupyterhub_config_shared_gpus.py", **OPTIONS)
    yield child
    child.stop(grace=60)


def exporter(sim) -> list[tuple[str, dict[str, str], float]]:
    """The simulated dcgm-exporter's series, as the service scrapes them."""
    with urllib.request.urlopen(sim.info["metrics"], timeout=10) as r:
        text = r.read().decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def decisions(hub, session: str) -> list:
    with Store.open(hub.info["store"]) as store:
        return [d for _, d in decisions_of(store, session)]


async def waiting_said(user: Client, said: set[str]) -> None:
    """Adds to `said` what the `user`'s page and the hub home page's embed say of her servers
    waiting for a GPU, each time it reads anew (until cancelled)."""
    while True:
        for path in ("", "embed/home"):
            _, page, _ = await user.call("GET", path)
            said.update(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", m))
                        for m in re.findall(r'<strong class="state-text">.*?</p>', page, re.S))
        await asyncio.sleep(0.5)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub, sim, webhook):
    """Sets the scene; yields (api, what was seen on the way) once mia and tia are
    reclaimed and nia trains on the freed MIG instance; then stops every server."""
    tasks: list[asyncio.Task] = []
    seen: dict = {}

    async def ready_then(user: str, work) -> None:
        await api.wait_ready(user)
        await work

    nia = Client(hub.info["url"])
    async with HubAPI.of(hub) as api:
        try:
            await api.ensure_user("nia")
            await nia.log_in("nia")  # to the service's pages, to read them while she waits
            # tom takes the T4 first, so that tia gets its second replica: the device's one
            # series is labelled with her pod (the exporter keeps the last holder)
            for user, profile in (("mia", "mig"), ("max", "mig"), ("tom", "sliced")):
                await api.start(user, profile)
            # max trains on his MIG instance; tom's cell trains on the shared T4 (a busy kernel)
            await asyncio.gather(
                ready_then("max", api.run_code("max", TRAIN.format(block=False))),
                ready_then("tom", asyncio.sleep(0)), api.wait_ready("mia"))
            tasks.append(asyncio.create_task(api.run_code("tom", TRAIN.format(block=True), timeout=1000)))
            await api.start("tia", "sliced")
            await api.wait_ready("tia")
            # tia opens a notebook and leaves it: a kernel, idle
            async with api.session.post(f"{api.url}/user/tia/api/kernels", json={"name": "python3"}) as r:
                assert r.status == 201, await r.text()
            # nia asks for a MIG instance: both are taken
            await api.start("nia", "mig")
            progress = asyncio.create_task(api.progress("nia", timeout=150))
            seen["nia_pages"] = set()
            pages = asyncio.create_task(waiting_said(nia, seen["nia_pages"]))
            tasks += [progress, pages]

            def tia_labelled_with_toms_work():
                t4 = [(labels["pod"], v) for name, labels, v in exporter(sim)
                      if name == "DCGM_FI_DEV_GPU_UTIL" and labels["modelName"] == "Tesla T4"]
                return t4 == [("jupyter-tia", 90.0)]
            await until(tia_labelled_with_toms_work, 30, "the T4's one series: tom's work, labelled tia")
            seen["exporter"] = exporter(sim)
            await until(lambda: webhook.events("mia/", "reclaim"), 90, "mia's reclaim notice")
            seen["nia_progress"] = await progress
            pages.cancel()
            # nia trains on the instance she got: kept, whenever tia's reclaim comes (her
            # never-used clock runs from her request, and the queue took part of it)
            await api.run_code("nia", TRAIN.format(block=False))
            await until(lambda: webhook.events("tia/", "reclaim"), 90, "tia's reclaim notice")
            yield api, seen
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await nia.close()


async def test_the_exporter_reports_mig_instances_and_the_shared_device_as_real_ones_do(scene):
    _, seen = scene
    mig = {labels["pod"]: (name, labels) for name, labels, _ in seen["exporter"] if "GPU_I_ID" in labels}
    assert {"jupyter-mia", "jupyter-max"} <= set(mig)
    assert not any(name == "DCGM_FI_DEV_GPU_UTIL" for name, _ in mig.values())  # MIG: engine activity only
    assert {labels["GPU_I_PROFILE"] for _, labels in mig.values()} == {"1g.10gb"}
    # the T4: one device, one series, labelled with one of the two pods on it
    t4 = {labels["pod"] for name, labels, _ in seen["exporter"] if labels.get("modelName") == "Tesla T4"}
    assert t4 == {"jupyter-tia"}


async def test_a_mig_session_never_used_is_reclaimed_on_its_own_instance(hub, scene, webhook):
    api, _ = scene
    warning, = webhook.events("mia/", "warning")
    reclaim, = webhook.events("mia/", "reclaim")
    assert warning["rule"] == reclaim["rule"] == "gpu-never-used"
    ev = reclaim["evidence"]
    # her instance's GR_ENGINE_ACTIVE (× 100): the idle floor, while max's instance of the
    # same GPU ran at 90 % all along
    assert ev["never_used"] is True and ev["gpus"] == 1 and len(ev["latest_util"]) == 1
    assert ev["latest_util"][0] < 1 and "gpu_shared" not in ev
    assert await api.server("mia") is None
    with Store.open(hub.info["store"]) as store:
        record, = [r for r in store.reclaims() if r.session == "mia/"]
    assert (record.outcome, record.rule, record.gpus) == ("stopped", "gpu-never-used", 1)


async def test_a_mig_session_using_its_instance_is_kept(hub, scene, webhook):
    api, _ = scene
    assert (await api.server("max"))["ready"] and not webhook.events("max/")
    ours = decisions(hub, "max/")
    assert not [d for d in ours if d.action in ("warn", "reclaim")]
    assert ours[-1].action == "keep" and ours[-1].rule == "gpu-active" and ours[-1].evidence["latest_util"] == [pytest.approx(90.0)]


async def test_a_spawn_waiting_for_a_mig_instance_is_told_so_and_gets_the_freed_one(scene):
    api, seen = scene
    messages = [e.get("message", "") for e in seen["nia_progress"]]
    waits = [m for m in messages if m.startswith("Waiting for a free")]
    assert waits and all(m.startswith("Waiting for a free MIG slice (1 MIG slice requested") for m in waits), messages
    # mia's warning says when hers is freed, a MIG slice too (the service's expected time)
    assert any(re.search(r"; a MIG slice is expected to be free in about \d+ (s|min)$", m) for m in waits), waits
    assert seen["nia_progress"][-1].get("ready"), messages
    # her page and the hub's home page say the same, the expected time with it
    said = seen["nia_pages"]
    mine = r"waiting for a MIG slice since .+ \(1 MIG slice\): a MIG slice is expected to be free in about \d+ (s|min)"
    assert any(re.fullmatch(mine, s) for s in said), said
    assert any(re.fullmatch(f"default server: {mine}", s) for s in said), said
    assert not any("GPU" in s.replace("MIG slice", "") for s in said), said
    assert (await api.server("nia"))["ready"]


async def test_time_sliced_sessions_are_decided_by_their_kernels(hub, scene, webhook):
    api, _ = scene
    # tia: her kernel idle, the device busy with tom's work on her series; the kernels decide
    warning, = webhook.events("tia/", "warning")
    reclaim, = webhook.events("tia/", "reclaim")
    for notice in (warning, reclaim):
        ev = notice["evidence"]
        assert notice["rule"] == "shared-gpu-idle-kernels", notice
        assert ev["gpu_shared"] is True and ev["shared_gpu_util"] == [90.0] and ev["latest_util"] == []
    assert "not this server's alone" in reclaim["reason"]
    assert await api.server("tia") is None
    with Store.open(hub.info["store"]) as store:
        record, = [r for r in store.reclaims() if r.session == "tia/"]
    assert (record.outcome, record.rule) == ("stopped", "shared-gpu-idle-kernels")
    # tom: no series of his own, and no need of one: his busy kernel keeps him; never
    # warned, nor held for the GPU data he lacks
    assert (await api.server("tom"))["ready"] and not webhook.events("tom/")
    ours = decisions(hub, "tom/")
    assert not [d for d in ours if d.action in ("warn", "reclaim") or d.rule == "gpu-data-missing"]
    # (the device's series, tia's, is in his evidence while she runs: whether his last change
    # of decision came before her stop or after is the cycles' timing, not the rule's)
    assert ours[-1].action == "keep" and ours[-1].rule == "kernel-busy" and ours[-1].evidence["latest_util"] == []
    assert ours[-1].evidence["shared_gpu_util"] in ([], [90.0])


async def test_the_admin_data_shows_each_sessions_gpu_type(hub, scene):
    api, _ = scene
    url = hub.info["url"] + PREFIX
    # each one's GPUs named as the waiting lines name them (issue 39)
    expected = {"max/": ("mig", A100, False, "1 MIG slice"), "nia/": ("mig", A100, False, "1 MIG slice"),
                "tom/": ("sliced", T4, True, "1 shared GPU")}

    async def shown() -> dict | None:
        # as of the service's last cycle, which may predate nia's start
        async with api.session.get(url + "api/admin/candidates") as r:
            assert r.status == 200, await r.text()
            sessions = (await r.json())["candidates"]
        got = {s["session"]: (s["profile"], s["gpu_type"], s["gpu_shared"], s["gpus_text"]) for s in sessions}
        return got if set(got) == set(expected) else None

    assert await until(shown, 30, "max, nia and tom on the admin data") == expected
    async with api.session.get(url + "admin") as r:
        assert r.status == 200, await r.text()
        page = await r.text()
    assert page.count(f'<span class="gpu-type">{A100}</span>') == 2
    assert page.count(f'<span class="gpu-type">{T4}</span>') == 1 and page.count('class="gpu-shared"') == 1
    assert re.findall(r'<td class="gpus" data-sort="(\d+)">([^<]*?) <span class="badge', page) == [
        ("1", "1 MIG slice"), ("1", "1 MIG slice"), ("1", "1 shared GPU")]


async def test_the_spawn_form_and_the_admin_headline_count_mig_slices_and_shared_gpus(hub, scene):
    """max and nia hold both MIG instances, tom one of the T4's two replicas (tia's was
    reclaimed): the admin headline and una's spawn form count each kind by its name, and
    each GPU profile says whether it starts now (issue 39)."""
    api, _ = scene
    url = hub.info["url"] + PREFIX

    async def capacity() -> dict | None:
        async with api.session.get(url + "api/admin/candidates") as r:
            return (await r.json())["totals"]["gpu_capacity"]

    assert await until(capacity, 90, "the cluster's GPUs on the admin data") == {"mig": 2, "shared": 2}
    async with api.session.get(url + "admin") as r:
        page = await r.text()
    assert re.search(r'<b id="gpus-held">3</b> held \(2 of 2 MIG slices and 1 of 2 shared GPUs\)', page), page
    await api.ensure_user("una")
    una = Client(hub.info["url"])

    async def form_once_tias_pod_is_gone() -> str | None:
        async with una.session.get(f"{hub.info['url']}/hub/spawn/una") as r:
            form = await r.text()
            assert r.status == 200, form
        return form if "1 of 2 shared GPUs" in form else None

    try:
        await una.log_in_to_hub("una")
        form = await until(form_once_tias_pod_is_gone, 60, "una's spawn form, tia's pod gone")
    finally:
        await una.close()
    assert '<p class="gpu-room">Free now: 0 of 2 MIG slices and 1 of 2 shared GPUs. Waiting for a GPU: no one.</p>' \
        in form, form
    fits = re.findall(r'<span class="gpu-fit d-block">([^<]*)</span>', form)
    assert fits == ["Waits for a GPU: 0 of 2 MIG slices free.", "Starts now: 1 of 2 shared GPUs free."], form
