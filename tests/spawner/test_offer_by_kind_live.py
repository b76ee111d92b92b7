"""A waiting user's spawn progress names what they wait for and the offer of a smaller
profile what it would give, on a real hub over GPUReclaimSpawner on the MIG and time-sliced
cluster (tests/support/shared_gpu_nodes.py): a MIG slice or a shared GPU is not "a GPU"
(issue 39)."""

from __future__ import annotations

import asyncio
import re
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


async def test_the_wait_and_the_offer_count_mig_slices_and_shared_gpus_by_their_names(hub, api):
    """alice holds one of the A100's two MIG slices, tom one of the T4's two replicas; bob asks
    for 2 MIG slices and tia for 2 shared GPUs: each waits, told so by its kind, until the
    queue timeout withdraws the request (said by its kind too), and each spawn page offers the
    1-slice or 1-replica profile by its kind."""
    for user, profile in (("alice", "mig"), ("tom", "sliced")):
        await api.start(user, profile)
    await asyncio.gather(api.wait_ready("alice"), api.wait_ready("tom"))
    for user, profile in (("bob", "mig-2"), ("tia", "sliced-2")):
        await api.start(user, profile)
    bob, tia = await asyncio.gather(api.progress("bob", timeout=90), api.progress("tia", timeout=90))
    for events, kind, free, profile in ((bob, "MIG slice", "1 MIG slice is", "1 × A100 MIG 1g.10gb"),
                                        (tia, "shared GPU", "1 shared GPU is", "1 × T4, time-sliced")):
        offered = [e for e in events if "would start at once" in e.get("message", "")]
        assert offered, events
        # every waiting line (the progress stream the spawn page shows) names the kind
        waits = [e["message"] for e in events if e.get("message", "").startswith("Waiting for a free")]
        assert waits and all(re.match(rf"Waiting for a free {kind} \(2 {kind}s requested, (no requests|1 request) "
                                      r"ahead of you, waiting \d+ (s|min)\)", m) for m in waits), waits
        assert offered[-1]["message"].endswith(OFFER.format(free=free, profile=profile, home="the hub's home page"))
        assert offered[-1]["html_message"].endswith(OFFER.format(free=free, profile=profile, home=HOME))
        # withdrawn: the queue timeout applies, said by the kind too
        assert events[-1].get("failed") and re.search(
            rf"No {kind} became free within \d+ s; your request for 2 {kind}s was withdrawn\.", events[-1]["message"])
