"""A waiting user's offer of a smaller profile names what it would give, on a real hub over
GPUReclaimSpawner on the MIG and time-sliced cluster (tests/support/shared_gpu_nodes.py): a
MIG slice or a shared GPU is not "a GPU" (issue 39)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ..support.live import api_fixture, hub_fixture
from ..support.shared_gpu_nodes import shared_gpus_scenario
from ..support.sim_cluster import sim_running

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

OFFER = ("{free} free now: “{profile}” would start at once. To take it, stop this request on "
         "{home} (Stop My Server) and start that profile.")
HOME = '<a href="/hub/home">the hub\'s home page</a>'


@pytest.fixture(scope="module")
def sim(control_plane, tmp_path_factory):
    with sim_running(tmp_path_factory.mktemp("sim"), shared_gpus_scenario("offer-by-kind"), control_plane) as child:
        yield child


hub = hub_fixture(Path(__file__).parent / "jupyterhub_config_offer_by_kind.py")
api = api_fixture("module")


async def test_the_offer_counts_mig_slices_and_shared_gpus_by_their_names(hub, api):
    """alice holds one of the A100's two MIG slices, tom one of the T4's two replicas; bob asks
    for 2 MIG slices and tia for 2 shared GPUs: each waits (until the queue timeout withdraws
    the request), and each spawn page offers the 1-slice or 1-replica profile by its kind."""
    for user, profile in (("alice", "mig"), ("tom", "sliced")):
        await api.start(user, profile)
    await asyncio.gather(api.wait_ready("alice"), api.wait_ready("tom"))
    for user, profile in (("bob", "mig-2"), ("tia", "sliced-2")):
        await api.start(user, profile)
    bob, tia = await asyncio.gather(api.progress("bob", timeout=90), api.progress("tia", timeout=90))
    for events, free, profile in ((bob, "1 MIG slice is", "1 × A100 MIG 1g.10gb"),
                                  (tia, "1 shared GPU is", "1 × T4, time-sliced")):
        offered = [e for e in events if "would start at once" in e.get("message", "")]
        assert offered, events
        assert offered[-1]["message"].endswith(OFFER.format(free=free, profile=profile, home="the hub's home page"))
        assert offered[-1]["html_message"].endswith(OFFER.format(free=free, profile=profile, home=HOME))
        assert "No GPU became free" in events[-1]["message"]  # withdrawn: the queue timeout applies
