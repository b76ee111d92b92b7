"""The what-if (`whatif.what_if`): a store's recorded observations (real SQLite files, as
the service records them) replayed under the live policy and under an override."""

from __future__ import annotations

import datetime as dt

import pytest

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.rules import load_rules
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.replay.whatif import MAX_BUCKETS, WhatIfError, what_if

from ..support.records import NOW, record, slow_loader, training, used_then_idle

DAY = dt.timedelta(days=1)
H = dt.timedelta(hours=1)


@pytest.fixture
def store(tmp_path):
    """Last week's used-then-idle session (3 days ago, stopped after 4 h) and, over the
    last 4 h, one used-then-idle (30 min at 90 %, then 0 %), one training, one at 5 %;
    a sample every 5 minutes."""
    with Store.open(f"sqlite:///{tmp_path / 'reclaim.sqlite'}") as s:
        record(s, NOW - 3 * DAY, 4, {"dave/": used_then_idle}, stop=True)
        record(s, NOW - 4 * H, 4, {"alice/": used_then_idle, "bob/train": training, "carol/": slow_loader})
        yield s


def run(store, override, since=NOW - 4 * DAY, until=NOW, live=None):
    return what_if(store, since, until, override, live=live or PolicyConfig(), now=NOW)


def test_a_9_percent_threshold_reclaims_the_slow_loader(store):
    r = run(store, {"gpu_idle_threshold": 9})
    assert r.settings == {"gpu_idle_threshold": 9.0}
    assert (r.sessions, r.samples) == (4, 4 * 48)
    assert (r.live.reclaims, r.override.reclaims) == (2, 3)  # alice and dave; carol too
    assert (r.live.warnings, r.override.warnings) == (2, 3)
    d, = r.differences
    assert (d.session, d.user, d.server, d.gpus) == ("carol/", "carol", "", 1)
    assert d.started == NOW - 4 * H
    assert d.live.reclaimed_at is None and d.live.warnings == 0
    # idle under 9 %, but it ran on the GPU (3-8 %): the idle rule, warned at 1 h, reclaimed at
    # 2 h, 2 h freed
    assert d.override.rule == "gpu-idle" and d.override.warnings == 1
    assert d.override.first_warning == NOW - 4 * H + 60 * dt.timedelta(minutes=1)
    assert d.override.reclaimed_at == NOW - 2 * H and d.override.gpu_hours_freed == 2.0
    assert r.override.gpu_hours_freed == pytest.approx(r.live.gpu_hours_freed + 2.0, abs=0.01)
    assert r.override.gpu_hours_held == pytest.approx(r.gpu_hours_recorded - r.override.gpu_hours_freed, abs=0.01)
    assert r.gpu_hours_recorded == 16.0


def test_idle_and_freed_gpu_hours_and_their_series(store):
    # alice alone: GPU last used 25 min after start; idle from the 30-min sample
    r = run(store, {"idle_reclaim_after": "90m"}, since=NOW - 4 * H)
    assert r.sessions == 3
    # live: reclaimed 2 h after last use (2 h 25 min): 1 h 55 min idle, 1 h 35 min freed
    assert (r.live.gpu_hours_idle, r.live.gpu_hours_freed) == (round(115 / 60, 2), round(95 / 60, 2))
    # override: reclaimed 90 min after last use (1 h 55 min): 1 h 25 min idle, 2 h 05 min freed
    assert (r.override.gpu_hours_idle, r.override.gpu_hours_freed) == (round(85 / 60, 2), round(125 / 60, 2))
    d, = r.differences
    assert d.session == "alice/" and d.live.rule == d.override.rule == "gpu-idle"
    assert d.override.reclaimed_at - d.live.reclaimed_at == -30 * dt.timedelta(minutes=1)
    # hourly buckets over the 4 h; they add up to the totals
    assert r.bucket == H and 4 <= len(r.series) <= 5
    assert r.series[0].start == r.since and r.series[-1].end == r.until
    assert all(b.end - b.start <= H for b in r.series)
    assert sum(b.live_idle for b in r.series) == pytest.approx(r.live.gpu_hours_idle, abs=0.01)
    assert sum(b.live_freed for b in r.series) == pytest.approx(r.live.gpu_hours_freed, abs=0.01)
    assert sum(b.override_idle for b in r.series) == pytest.approx(r.override.gpu_hours_idle, abs=0.01)
    assert sum(b.override_freed for b in r.series) == pytest.approx(r.override.gpu_hours_freed, abs=0.01)
    # the result as JSON
    out = r.to_dict()
    assert out["bucket_seconds"] == 3600 and out["live"]["reclaims"] == 1
    assert out["differences"][0]["override"]["rule"] == "gpu-idle"


def test_long_periods_have_coarser_buckets(store):
    for days, size in ((2, H), (4, 3 * H), (10, 6 * H), (31, DAY)):
        r = run(store, {"gpu_idle_threshold": 9}, since=NOW - days * DAY)
        assert r.bucket == size and len(r.series) <= MAX_BUCKETS + 1, days


def test_the_live_settings_change_nothing(store):
    r = run(store, {"idle_reclaim_after": "2h", "gpu_idle_threshold": 1})
    assert r.live == r.override and r.differences == [] and r.differences_total == 0


def test_policy_rules_are_made_again_over_the_override(store):
    # alice's rule reclaims after 3 h; the override changes the base policy only
    live = load_rules([{"name": "alice-slow", "match": {"users": ["alice"]}, "set": {"idle_reclaim_after": "3h"}}],
                      PolicyConfig())
    r = run(store, {"idle_reclaim_after": "90m"}, live=live)
    assert {d.session for d in r.differences} == {"dave/"}  # alice's own rule still wins
    with pytest.raises(WhatIfError, match='with policy rule "alice-slow": idle_warn_after must not exceed'):
        run(store, {"idle_warn_after": "4h", "idle_reclaim_after": "5h"}, live=live)


@pytest.mark.parametrize("override, since, until, message", [
    ({"idle_reclaim_afterr": "2h"}, 4 * DAY, 0 * DAY, r"unknown policy setting idle_reclaim_afterr \(known: .*idle_reclaim_after"),
    ({"idle_reclaim_after": "soon"}, 4 * DAY, 0 * DAY, "idle_reclaim_after: "),
    ({"gpu_idle_threshold": "nine"}, 4 * DAY, 0 * DAY, "gpu_idle_threshold: must be a number"),
    ({"gpu_idle_threshold": 0}, 4 * DAY, 0 * DAY, r"gpu_idle_threshold must be a percent in \(0, 100\]"),
    ({"idle_warn_after": "3h"}, 4 * DAY, 0 * DAY, "idle_warn_after must not exceed idle_reclaim_after"),
    ({}, 4 * DAY, 0 * DAY, "no setting to change"),
    ({"gpu_idle_threshold": 9}, 0 * DAY, 4 * DAY, "the period is empty"),
    ({"gpu_idle_threshold": 9}, 32 * DAY, 0 * DAY, "the period is 32 days: at most 31 days"),
    ({"gpu_idle_threshold": 9}, 10 * DAY, 5 * DAY, "the store has no observations from"),
])
def test_bad_input_is_a_clear_error(store, override, since, until, message):
    with pytest.raises(WhatIfError, match=message):
        run(store, override, since=NOW - since, until=NOW - until)
