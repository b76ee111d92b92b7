"""Dry run, the first step of a rollout: the service decides, records and reports
everything (warnings to the admins only), and stops nothing."""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu_reclaim.store import Store

from ..support.live import api_fixture
from ..support.service_hub import QUICK, cycles, latest_rule, metric, metrics, start_service_hub, until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    child = start_service_hub(tmp_path_factory.mktemp("hub"), sim, webhook, dry_run=True, **QUICK)
    yield child
    child.stop(grace=60)


api = api_fixture("module")


async def test_dry_run_decides_and_reports_but_stops_nothing(hub, api, webhook):
    await api.start("alice", "gpu-1")  # idle GPU: would be reclaimed
    await api.start("bob", "cpu")  # idle, no GPU: would be culled
    await asyncio.gather(api.wait_ready("alice"), api.wait_ready("bob"))

    limit = QUICK["never_used_reclaim_after"] + 60
    await until(lambda: latest_rule(hub, "alice/") == ("reclaim", "gpu-never-used"), limit,
                "alice would be reclaimed")
    await until(lambda: latest_rule(hub, "bob/") == ("reclaim", "idle-culler-timeout"), 60,
                "bob would be culled")
    # a few more cycles in which a real run would have stopped them
    after = cycles(hub)
    await until(lambda: cycles(hub) >= after + 3, 60, "three more cycles")

    # nothing stopped, nothing begun
    assert (await api.server("alice"))["ready"] and (await api.server("bob"))["ready"]
    with Store.open(hub.info["store"]) as store:
        assert store.reclaims() == []
    # the warning went to the admins only, marked as a dry run; no reclaim notice
    warning, = webhook.events("alice/", "warning")
    assert warning["recipients"] == ["admin"] and warning["dry_run"] is True
    assert "[dry run]" in warning["text"]
    assert webhook.events("alice/", "reclaim") == []
    values = metrics(hub)
    name = "jupyterhub_gpu_reclaim"
    assert metric(values, f"{name}_dry_run") == 1
    assert metric(values, f"{name}_reclaims_total", rule="gpu-never-used", outcome="dry-run") == 1
    assert metric(values, f"{name}_reclaims_total", rule="idle-culler-timeout", outcome="dry-run") == 1
    assert metric(values, f"{name}_reclaims_total", rule="gpu-never-used", outcome="stopped") == 0
