"""A user's own server answers the kernel probe with an absurd `last_activity`, end to end.

eve writes `~/.jupyter/jupyter_server_config.py` from her own kernel — as any user can —
so that her single-user server reports every kernel's `last_activity` as
`9999-12-31T23:59:59-23:59` (an OverflowError once converted to UTC; it once made every
cycle fail). A real JupyterHub runs the service over KubeSpawner on the simulated cluster;
eve's and gary's GPUs sit idle. gary is warned and reclaimed on schedule, eve is warned
but held (her kernels cannot be read), and the cycles keep succeeding.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.live import api_fixture
from ..support.service_hub import QUICK, latest_rule, metric, metrics, start_service_hub, until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ABSURD = "9999-12-31T23:59:59-23:59"
HOSTILE_CONFIG = f'''
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager


class AbsurdKernelManager(AsyncMappingKernelManager):
    def kernel_model(self, kernel_id):
        return dict(super().kernel_model(kernel_id), last_activity={ABSURD!r})


c.ServerApp.kernel_manager_class = AbsurdKernelManager
'''
P = "jupyterhub_gpu_reclaim_"


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    child = start_service_hub(tmp_path_factory.mktemp("hub"), sim, webhook, **QUICK)
    yield child
    child.stop(grace=60)


api = api_fixture("module")


async def test_a_server_answering_an_absurd_last_activity_holds_only_its_own_session(hub, api, webhook):
    # eve configures her own server, as a user can, and restarts it
    await api.start("eve", "gpu-1")
    await api.wait_ready("eve")
    await api.run_code("eve", "import pathlib; d = pathlib.Path.home() / '.jupyter'; d.mkdir(exist_ok=True); "
                              f"(d / 'jupyter_server_config.py').write_text({HOSTILE_CONFIG!r})")
    await api.stop("eve")
    restarted = dt.datetime.now(dt.timezone.utc)
    await api.start("eve", "gpu-1")
    await api.wait_ready("eve")
    async with api.session.post(f"{api.url}/user/eve/api/kernels", json={"name": "python3"}) as r:
        assert r.status == 201, await r.text()
    async with api.session.get(f"{api.url}/user/eve/api/kernels") as r:
        assert [k["last_activity"] for k in await r.json()] == [ABSURD]  # what the probe gets
    hostile_since = time.time()

    await api.start("gary", "gpu-1")
    await api.wait_ready("gary")
    await until(lambda: webhook.events("gary/", "reclaim"), 120, "gary's reclaim notice")

    # gary: warned, then reclaimed on schedule, as with no eve at all
    assert [e["rule"] for e in webhook.events("gary/")] == ["gpu-never-used", "gpu-never-used"]
    assert await api.server("gary") is None
    # eve: warned (warnings do not need her kernels), then held, never reclaimed (her
    # server as restarted: with QUICK timings the first may have been warned too)
    assert [e["event"] for e in webhook.events("eve/")
            if parse_time(e["evidence"]["idle_since"]) >= restarted] == ["warning"]
    assert (await api.server("eve"))["ready"]
    await until(lambda: latest_rule(hub, "eve/") == ("hold", "kernel-data-missing"), 30, "eve held")
    log = hub.log_path.read_text()
    assert ("kernels of eve: /api/kernels: a malformed entry: last_activity: timestamp out of range "
            f"once in UTC: '{ABSURD}'") in log
    assert "OverflowError" not in log and "the cycle failed" not in log

    # the cycles kept succeeding, and the metrics say so
    def recent_success():
        values = metrics(hub)
        return values if metric(values, P + "last_successful_cycle_timestamp_seconds") > hostile_since + 10 else None

    values = await until(recent_success, 30, "a successful cycle well after eve's server turned hostile")
    assert metric(values, P + "cycles_total", result="error") == 0
    assert metric(values, P + "cycles_total", result="ok") >= 10
    assert metric(values, P + "holds", reason="kernel-data-missing") == 1
    assert metric(values, P + "signal_errors_total", source="kernels") >= 5
    assert metric(values, P + "reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
