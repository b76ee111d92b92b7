"""The drop-in registered as the READMEs register it, on a real hub.

- As jupyterhub-idle-culler's README registers the culler (a `command`, no `url`, the
  culler's role), with our module in place of the culler's: JupyterHub gives such a service
  JUPYTERHUB_SERVICE_URL=http://127.0.0.1:0/. The service stays up without a web server,
  says so once, runs its cycles and culls an idle server without a GPU as the culler would.
- As this repository's README registers it (with a `url`): it serves /metrics and its pages.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
import pytest_asyncio

from gpu_reclaim_sim.launch import free_port

from ..support.live import start_test_hub
from ..support.hubapi import HubAPI
from ..support.service_hub import QUICK, until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HERE = Path(__file__).parent
NO_WEB_SERVER = "no web server"
FORGED = "x\r\nINFO forged"


def start_registered_hub(workdir: Path, sim, which: str, **env: str):
    """The hub with the service registered by README `which`, on the loopback cluster."""
    workdir.mkdir(parents=True, exist_ok=True)
    flags = [f"--timeout={QUICK['timeout']}", "--cull-every=2", "--namespace=jhub",
             f"--kubeconfig={sim.info['kubeconfig']}", "--prometheus-url=",
             f"--dcgm-exporter-urls={sim.info['metrics']}",
             f"--store-url=sqlite:///{workdir / 'gpu_reclaim.sqlite'}"]
    return start_test_hub(workdir, HERE / "jupyterhub_config_registered.py", sim,
                          env={"GPU_RECLAIM_REGISTRATION": which,
                               "GPU_RECLAIM_SERVICE_FLAGS": json.dumps(flags), **env})


@pytest.fixture(scope="module")
def culler_shaped_hub(sim, tmp_path_factory):
    child = start_registered_hub(tmp_path_factory.mktemp("culler-shaped"), sim, "idle-culler")
    yield child
    child.stop(grace=60)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def culler_api(culler_shaped_hub):
    async with HubAPI.of(culler_shaped_hub) as client:
        yield client


async def test_registered_as_idle_cullers_readme_it_stays_up_and_culls(culler_shaped_hub, culler_api):
    hub, api = culler_shaped_hub, culler_api
    # no GPU, no activity: the culler's rule culls them at --timeout; one named to forge log lines
    for user in ("bob", FORGED):
        await api.request("POST", f"/users/{quote(user, safe='')}", ok=(201, 409))  # bob is in allowed_users
        await api.request("POST", f"/users/{quote(user, safe='')}/server", {"profile": "cpu"})
    for user in ("bob", FORGED):
        await until(lambda user=user: _ready(api, user), 120, f"{user!r}'s server ready")
    for user in ("bob", FORGED):
        await until(lambda user=user: _gone(api, user), QUICK["timeout"] + 60,
                    f"{user!r}'s idle server culled")
    log = hub.log_path.read_text(errors="replace")
    # one process all along: never exited, never restarted by the hub; said once why it serves nothing
    assert "Service jupyterhub-idle-culler-service exited" not in log, log[-3000:]
    assert "--bind-url must be" not in log
    assert log.count(NO_WEB_SERVER) == 1, log[-3000:]
    assert "reclaim bob (idle-culler-timeout)" in log
    # the service's lines keep a name on one line (the hub's own lines are the hub's)
    assert "reclaim x\\r\\nINFO forged (idle-culler-timeout)" in log


async def _server(api: HubAPI, user: str) -> dict | None:
    return (await api.request("GET", f"/users/{quote(user, safe='')}"))["servers"].get("")


async def _ready(api: HubAPI, user: str) -> bool:
    server = await _server(api, user)
    return bool(server and server["ready"])


async def _gone(api: HubAPI, user: str) -> bool:
    return await _server(api, user) is None


@pytest.fixture(scope="module")
def readme_hub(sim, tmp_path_factory):
    port = free_port()
    child = start_registered_hub(tmp_path_factory.mktemp("readme"), sim, "ours",
                                 GPU_RECLAIM_SERVICE_PORT=str(port))
    yield child
    child.stop(grace=60)


@pytest.mark.hub_contract
async def test_readmes_example_serves_metrics_and_pages(readme_hub):
    url = f"{readme_hub.info['url']}/services/gpu-reclaim/"

    def get(path: str) -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(url + path, timeout=10) as r:
                return r.status, r.read().decode(), r.url
        except urllib.error.HTTPError as e:
            return e.code, "", e.url

    status, metrics, _ = await until(lambda: (r := get("metrics"))[0] == 200 and r, 60, "/metrics served")
    assert "jupyterhub_gpu_reclaim_dry_run 0.0" in metrics  # the README registers it culling (--dry-run: advice)
    # the pages: through the hub's OAuth login, which lands on the hub's login page
    status, _, landed = await asyncio.to_thread(get, "")
    assert status == 200 and "/hub/login" in landed, landed
    log = readme_hub.log_path.read_text(errors="replace")
    assert NO_WEB_SERVER not in log and "serving /metrics on http://127.0.0.1:" in log
