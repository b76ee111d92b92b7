"""The what-if's limits (issue 27, finding 6) without a hub: durations an override may set
are bounded (`9999999d` once answered 500, an OverflowError in the replay), and the replay
runs in a process of its own (`whatif_process`) that answers as the replay in the service's
process did, passes on its refusals, and is stopped past its time budget."""

from __future__ import annotations

import datetime as dt
import multiprocessing

import pytest

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.replay.whatif import WhatIfError, what_if
from jupyterhub_gpu_reclaim.replay.whatif_process import OverBudget, replay_in_process

from ..support.records import NOW, record, slow_loader, used_then_idle

H = dt.timedelta(hours=1)
SINCE = NOW - 4 * H


@pytest.fixture
def store(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'reclaim.sqlite'}") as s:
        record(s, SINCE, 4, {"alice/": used_then_idle, "carol/": slow_loader})
        yield s


def run(store, override):
    return what_if(store, SINCE, NOW, override, live=PolicyConfig(), now=NOW)


@pytest.mark.parametrize("name", ["idle_reclaim_after", "warning_lead", "max_age"])
def test_a_duration_beyond_a_year_is_refused_with_its_name(store, name):
    with pytest.raises(WhatIfError, match=rf"^{name}: 9,999,999 days is longer than a what-if replays: "
                                          r"at most 366 days$"):
        run(store, {name: "9999999d"})


def test_a_year_replays(store):
    r = run(store, {"idle_reclaim_after": "366d", "max_age": "366d"})
    assert (r.live.reclaims, r.override.reclaims) == (1, 0)  # alice's idle GPU, then never


async def test_the_replay_in_its_own_process_answers_as_in_the_service(store):
    override = {"gpu_idle_threshold": 9}
    assert await replay_in_process(store, SINCE, NOW, override, live=PolicyConfig(), now=NOW) == run(store, override)


async def test_its_refusals_come_back_as_they_are(store):
    with pytest.raises(WhatIfError, match="the store has no observations from"):
        await replay_in_process(store, NOW - 30 * 24 * H, NOW - 29 * 24 * H, {"gpu_idle_threshold": 9},
                                live=PolicyConfig(), now=NOW)


async def test_a_replay_past_its_budget_is_stopped(store):
    with pytest.raises(OverBudget, match=r"ran longer than its 0.01 s and was stopped: replay a shorter period"):
        await replay_in_process(store, SINCE, NOW, {"gpu_idle_threshold": 9}, live=PolicyConfig(), now=NOW,
                                budget_s=0.01)
    assert [p for p in multiprocessing.active_children() if p.name == "gpu-reclaim what-if"] == []
