"""alice's GPU session on a release, through proxy-public, as a user and the admin see it:
the story the base release must run and the broken ones must fail (tests/release)."""

from __future__ import annotations

import json

from gpu_reclaim_sim.z2jh import release as z2jh
from jupyterhub_gpu_reclaim.spawner.core import TIMINGS_ANNOTATION
from jupyterhub_gpu_reclaim.spawner.service_link import SPAWNER_SERVICE

from .hubapi import HubAPI
from .release import ADMINS, forbidden, service_token
from .release_client import logged_in, metrics, the_service_answers
from .service_hub import metric, until


async def gpu_story(sim, release: z2jh.Release) -> None:
    """alice's GPU session on `release`, through proxy-public; an AssertionError names the
    first step that fails. The service's pages answer (the proxy reaches the hub pod's
    10101 under the NetworkPolicy); alice logs in, into the service's pages too; the hub's
    pages carry the reclaim panel; she starts the spawn page's 1-GPU profile; the spawner
    annotates her pod (`patch`, rbac.yaml) and places it by image locality (the
    ClusterRole); the service warns her (her JupyterLab extension sees it), then reclaims
    the never-used GPU through the hub, and the spawner, asking the service with its own
    token, gives the pod the reclaim's grace period; the admin sees the reclaim on the admin
    page; nothing the hub's ServiceAccount asked was refused; no token of the service's or
    the spawner's is in her pod or the hub's log."""
    await the_service_answers(release)
    alice = await logged_in(release, "alice")
    try:
        status, page, _ = await alice.call("GET", "")
        assert status == 200 and "alice" in page
        assert 'id="gpu-reclaim-panel"' in await alice.page("home")  # the hub's templates (template_paths)
        spawn_page = await alice.page("spawn")
        assert 'value="gpu-1"' in spawn_page and 'value="gpu-2"' in spawn_page
        await alice.spawn("gpu-1")
        api = HubAPI(release.url, await alice.token("alice"))
        try:
            server = await api.wait_ready("alice", timeout=120)
            pod = json.loads(release.kubectl("get", "pod", "jupyter-alice", "-o", "json"))
            assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
            assert pod["spec"]["nodeName"].startswith("gpu-")
            annotations = pod["metadata"].get("annotations") or {}
            assert TIMINGS_ANNOTATION in annotations, (
                f"jupyter-alice has no {TIMINGS_ANNOTATION} annotation; the hub: "
                + _record(release.hub_log(), "could not annotate"))
            assert json.loads(annotations[TIMINGS_ANNOTATION])
            _no_token_for_the_user(release, pod)

            async def warned():
                _, body = await alice.json("GET", "api/sessions")
                return next((s for s in body.get("sessions", []) if s["state"] == "warned"), None)
            session = await until(warned, 60, "alice's session warned")
            assert session["rule"] == "gpu-never-used" and session["reclaim_at"]
            # the JupyterLab extension's server side calls the service with the server's token
            # (server_token_scopes) at singleuser.extraEnv's URL, through proxy-public
            async with api.session.get(f"{release.url}/user/alice/gpu-reclaim/status") as r:
                lab = await r.json()
            assert r.status == 200 and lab["available"] and lab["session"]["state"] == "warned", lab
            _, banner, _ = await alice.call("GET", "embed/banner")
            assert "banner warned" in banner
            # reclaimed through the hub: her server and pod are gone, the reclaim is hers to see
            await until(lambda: _gone(api), 60, "alice's server reclaimed")
            await until(lambda: not release.kubectl("get", "pods", "-l", "hub.jupyter.org/username=alice",
                                                    "-o", "name").strip(), 60, "alice's pod deleted")
            _, body = await alice.json("GET", "api/sessions")
            assert [r["session"] for r in body["reclaims"]] == ["alice/"]
            assert server["started"]
        finally:
            await api.close()
    finally:
        await alice.close()
    values = metrics(release)
    assert metric(values, "jupyterhub_gpu_reclaim_reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    admin = await logged_in(release, ADMINS[0])
    try:
        status, body = await admin.json("GET", "api/admin/history?since=1h")
        assert status == 200 and [r["session"] for r in body["reclaims"]] == ["alice/"], body
    finally:
        await admin.close()
    assert not forbidden(sim), forbidden(sim)
    log = release.hub_log()
    assert "image locality off" not in log and "could not annotate" not in log
    # the spawner asked the service, with its own token, whether alice's stop was a reclaim:
    # it was, so her pod got the reclaim's grace period (reclaim_grace_period's default)
    assert "cannot ask the reclaim service" not in log, _record(log, "cannot ask the reclaim service")
    assert "stopping alice with the reclaim's grace period, 60 s" in log, log[-3000:]
    for token in (service_token(release), service_token(release, SPAWNER_SERVICE)):
        assert token not in log


def _no_token_for_the_user(release: z2jh.Release, pod: dict) -> None:
    """Neither the service's token nor the spawner's is in the user's pod (its spec, its
    environment as a process in it sees it), and the pod refers to no Secret."""
    env = release.kubectl("exec", pod["metadata"]["name"], "--", "env")
    assert "JUPYTERHUB_API_TOKEN=" in env  # her server's own token is there: the exec saw it
    spec = json.dumps(pod)
    for token in (service_token(release), service_token(release, SPAWNER_SERVICE)):
        assert token not in spec and token not in env
    assert '"secretKeyRef"' not in spec and '"secretRef"' not in spec


def _record(log: str, needle: str) -> str:
    """The log record with `needle`, its continuation lines joined, without HTTP headers."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if needle in line), None)
    if start is None:
        return ""
    record = [lines[start]]
    for line in lines[start + 1:]:
        if line.startswith("["):
            break
        if not line.strip().startswith("HTTP response headers"):
            record.append(line.strip())
    return " ".join(record)


async def _gone(api: HubAPI) -> bool:
    return await api.server("alice") is None
