"""GPU-hours per day (`usage.daily_usage`, the admin page's week) from a store filled the way
the service fills it: session lines, decisions on change, reclaims and each cycle's pressure."""

from __future__ import annotations

import datetime as dt

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Decision, Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.service.daily_hours import FREED_HORIZON, daily_usage, freed_gpu_hours

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MIN = dt.timedelta(minutes=1)


def t(day: int, hour: float) -> dt.datetime:
    return dt.datetime(2026, 11, day, tzinfo=UTC) + dt.timedelta(hours=hour)


def session(sid: str, gpus: int, started: dt.datetime) -> Session:
    user, _, server = sid.partition("/")
    return Session(id=sid, user=user, server=server, gpus=gpus, started=started)


def decide(store: Store, at: dt.datetime, sid: str, rule: str) -> None:
    store.record_decisions([Decision(session=sid, action="keep", rule=rule, reason="")], at)


@pytest.fixture
def store(tmp_path):
    """alice (2 GPUs) from 22:00 on the 9th, busy, idle from 23:00, reclaimed at 02:00 on
    the 10th; bob (1 GPU) idle since the 8th and still running; carol without a GPU; pods
    waiting for 1 GPU from 10:00 to 10:10 on the 10th, for 2 from 11:00 (no cycle since)."""
    with Store.open(tmp_path / "reclaim.sqlite") as s:
        alice, bob, carol = session("alice/", 2, t(9, 22)), session("bob/", 1, t(8, 20)), session("carol/", 0, t(9, 1))
        for who in (alice, bob, carol):
            s.record_observations(who.started, [SessionSample(who.id, Sample(t=who.started, gpu_util=(0.0,) * who.gpus))],
                                  pending_gpus=None, sessions=[who])
        decide(s, t(8, 21), "bob/", "gpu-idle")
        decide(s, t(9, 1), "carol/", "cpu-idle")
        decide(s, t(9, 22), "alice/", "gpu-busy")
        decide(s, t(9, 23), "alice/", "gpu-idle")
        rid = s.begin_reclaim("alice/", "gpu-idle", t(10, 1.9), {}, 2, episode="e")
        s.finish_reclaim(rid, t(10, 2), "stopped")
        s.session_stopped("alice/", t(10, 2))
        for at, pending in ((t(10, 10), 1), (t(10, 10) + 5 * MIN, 1), (t(10, 10) + 10 * MIN, 0), (t(10, 11), 2)):
            s.record_observations(at, [], pending_gpus=pending)
        yield s


def test_a_day_holds_what_sessions_held_idled_freed_and_waited_for(store):
    day9, day10 = daily_usage(store, NOW, days=2)
    assert (day9.start, day9.end, day10.start, day10.end) == (t(9, 0), t(10, 0), t(10, 0), NOW)
    # held: alice 2 GPUs × 2 h each day; bob 1 GPU all along; carol has no GPU
    assert (day9.held, day10.held) == (2 * 2 + 24, 2 * 2 + 12)
    # idle: alice from 23:00 to her stop, bob since before the window (his last decision)
    assert (day9.idle, day10.idle) == (2 * 1 + 24, 2 * 2 + 12)
    # freed: alice's 2 GPUs from her stop at 02:00 until now
    assert (day9.freed, day10.freed) == (0, 2 * 10) == (0, freed_gpu_hours(2, t(10, 2), NOW))
    # waiting: 1 GPU for 10 min, then 2 GPUs for at most 10 min after the last cycle
    assert (day9.waiting, day10.waiting) == (0, round((1 * 10 + 2 * 10) / 60, 2))


def test_a_reclaim_frees_for_a_day_at_most(store):
    later = NOW + 3 * FREED_HORIZON
    assert freed_gpu_hours(2, t(10, 2), later) == 48
    days = daily_usage(store, later, days=7)
    assert [d.start for d in days] == [t(7, 0) + i * dt.timedelta(days=1) for i in range(7)]
    assert sum(d.freed for d in days) == 48 and days[-1].end == later


def test_an_empty_store_has_empty_days(tmp_path):
    with Store.open(tmp_path / "reclaim.sqlite") as s:
        assert [(d.held, d.idle, d.freed, d.waiting) for d in daily_usage(s, NOW)] == [(0, 0, 0, 0)] * 7
