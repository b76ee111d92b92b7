"""The values files' JupyterHub configuration, rendered as the z2jh chart renders it, loads in
a real JupyterHub on the simulated cluster, which starts the reclaim service with the role
and the user access the docs describe.

The values are adapted to the loopback test environment by one more values file, as a user's
own file would adapt them to their cluster: the service's address (a free local port instead
of hub:10101), the Python that runs it, GPU data from the simulated dcgm-exporter instead of
Prometheus, the store in the test's directory instead of the hub's PVC, and the namespace.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.error
import urllib.request

import pytest
import yaml

from jupyterhub_gpu_reclaim.launch import REPO, free_port

from .. import conftest
from ..conftest import hub_major, start_test_hub
from ..hubapi import HubAPI
from .test_values import SERVICE_SCOPES
from .z2jh_chart import BASE, HELM_VALUES, Z2JH, chart_values

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not Z2JH.exists(), reason="../shared/z2jh is not beside the clone")]


# users' access to the service: JupyterHub 6's extra_user_scopes (in the base file), and the
# "user" role override documented for JupyterHub 5 (which JupyterHub 6 honours too)
USER_ROLE_OVERRIDE = "jupyterhub5-user-role.yaml"


@pytest.fixture(scope="module", params=[None, USER_ROLE_OVERRIDE],
                ids=["extra_user_scopes", "user-role-override"])
def hub(request, sim, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("z2jh-hub")
    port = free_port()
    loopback = {
        "hub": {"services": {"gpu-reclaim": {
            "url": f"http://127.0.0.1:{port}",
            "command": [conftest.HUB_PYTHON, "-m", "jupyterhub_gpu_reclaim"]}}},
        "custom": {"gpuReclaim": {"options": {
            "bind-url": f"http://127.0.0.1:{port}",
            "store-url": f"sqlite:///{workdir / 'gpu_reclaim.sqlite'}",
            "prometheus-url": None, "prometheus-pod-label": None,
            "dcgm-exporter-urls": [sim.info["metrics"]],
            "namespace": "jhub", "cull-every": 2}}},
    }
    # the rollout's first step: the base file with the dry-run variant
    files = [BASE, HELM_VALUES / "dry-run.yaml"] + ([HELM_VALUES / request.param] if request.param else [])
    values = chart_values(*files, extra=loopback)
    (workdir / "values.yaml").write_text(yaml.safe_dump(values))
    token = secrets.token_hex(16)
    child = start_test_hub(workdir, REPO / "tests" / "deploy" / "jupyterhub_config_z2jh.py", sim, env={
        "GPU_RECLAIM_Z2JH_VALUES": str(workdir / "values.yaml"),
        "GPU_RECLAIM_Z2JH_SECRETS": json.dumps({"hub.services.gpu-reclaim.apiToken": token}),
    })
    child.info["service_token"] = token
    child.info["variant"] = request.param
    yield child
    child.stop(grace=30)


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status, r.read().decode()


async def test_rendered_config_runs_the_service(hub):
    status, _ = get(f"{hub.info['url']}/hub/health")
    assert status == 200
    # the service is up behind the proxy, in dry-run, and has run cycles against the hub and the cluster
    text = ""
    for _ in range(60):
        try:
            status, text = get(f"{hub.info['url']}/services/gpu-reclaim/metrics")
        except OSError:
            status = 0
        if status == 200 and 'jupyterhub_gpu_reclaim_cycles_total{result="ok"}' in text:
            break
        await asyncio.sleep(0.5)
    assert status == 200, hub.log_tail()
    assert "jupyterhub_gpu_reclaim_dry_run 1.0" in text
    assert 'jupyterhub_gpu_reclaim_cycles_total{result="ok"}' in text, hub.log_tail()


async def test_service_role_has_the_documented_scopes(hub):
    me = json.loads(get(f"{hub.info['url']}/hub/api/user", hub.info["service_token"])[1])
    assert me["kind"] == "service" and me["name"] == "gpu-reclaim"
    scopes = set(me["scopes"])
    assert SERVICE_SCOPES <= scopes
    assert not {"admin:users", "admin:servers", "servers", "users", "access:servers"} & scopes


async def _user_token(hub, name: str) -> str:
    async with HubAPI.of(hub) as api:
        await api.ensure_user(name)
        return (await api.request("POST", f"/users/{name}/tokens", {"note": "deploy test"}))["token"]


async def test_users_may_access_the_service(hub):
    if hub_major() == 5 and hub.info["variant"] != USER_ROLE_OVERRIDE:
        pytest.skip("JupyterHub 5 needs jupyterhub5-user-role.yaml for this (the next test)")
    token = await _user_token(hub, "alice")
    me = json.loads(get(f"{hub.info['url']}/hub/api/user", token)[1])
    assert "access:services!service=gpu-reclaim" in me["scopes"]
    assert not any(s.startswith("access:services") and s != "access:services!service=gpu-reclaim"
                   for s in me["scopes"])
    # the service's pages answer her token
    status, _ = get(f"{hub.info['url']}/services/gpu-reclaim/", token)
    assert status == 200


async def test_on_jupyterhub5_the_base_file_alone_gives_users_no_access(hub):
    """What docs/install-z2jh.md says: JupyterHub 5 has no extra_user_scopes (it logs that it
    does not know the option), so without jupyterhub5-user-role.yaml users get 403 on the
    service's pages."""
    if hub_major() != 5 or hub.info["variant"] == USER_ROLE_OVERRIDE:
        pytest.skip("JupyterHub 5 with the base file alone only")
    token = await _user_token(hub, "alice")
    me = json.loads(get(f"{hub.info['url']}/hub/api/user", token)[1])
    assert not any(s.startswith("access:services") for s in me["scopes"])
    with pytest.raises(urllib.error.HTTPError) as e:
        get(f"{hub.info['url']}/services/gpu-reclaim/", token)
    assert e.value.code == 403
    assert "Config option `extra_user_scopes` not recognized by `JupyterHub`" in hub.log_path.read_text()


async def test_the_hubs_admin_holds_the_reclaim_admin_scope(hub):
    # the demo's admin_users ({"admin"}) join gpu-reclaim-admins: the admin's token carries the
    # scope that opens the admin page (the hub's admin flag alone would not)
    async with HubAPI.of(hub) as api:
        await api.ensure_user("admin")
        token = (await api.request("POST", "/users/admin/tokens", {"note": "deploy test"}))["token"]
    me = json.loads(get(f"{hub.info['url']}/hub/api/user", token)[1])
    assert me["admin"] and "custom:gpu-reclaim:admin" in me["scopes"]
    status, _ = get(f"{hub.info['url']}/services/gpu-reclaim/api/admin/queue", token)
    assert status == 200


async def test_rendered_config_uses_the_spawner(hub):
    async with HubAPI.of(hub) as api:
        info = await api.request("GET", "/")
        assert info["version"] == conftest.HUB_VERSION
    log = hub.log_path.read_text(errors="replace")
    assert "GPUReclaimSpawner" in log or "jupyterhub_gpu_reclaim.spawner" in log, hub.log_tail()
