"""Users interrupted (`interruptions`, the backtest's ``by_rule`` and ``returned``): a reclaim
after which the same server's kernels are busy again, by how soon, per rule, for the policy
and the reference rules, in the JSON and the text."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.replay.backtest import backtest
from jupyterhub_gpu_reclaim.replay.backtest_report import format_report
from jupyterhub_gpu_reclaim.replay.interruptions import bucket

from ..support.clock import START, at
from ..support.traces import Trace, ts

# the default policy reclaims a server nothing ran on at 2 h; each user is back this long after
BACK = {"a/": 20, "b/": 90, "c/": 5 * 60, "d/": 10 * 60, "e/": None}
RECLAIM = 120


def back_at(minutes):
    """Nothing runs until `minutes` after the reclaim, then a busy kernel (None: never)."""
    def sample(m):
        busy = minutes is not None and m >= RECLAIM + minutes
        return {"gpu_util": [50.0 if busy else 0.0],
                "kernels": [{"execution_state": "busy" if busy else "idle",
                             "last_activity": ts(at(m) if busy else START)}],
                "hub_last_activity": ts(START)}
    return sample


def test_each_reclaim_is_told_by_how_soon_its_user_came_back(tmp_path):
    trace = Trace(hours=16, step=1)
    for sid, minutes in BACK.items():
        trace.session(sid, sample=back_at(minutes))
    report = backtest(trace.write(tmp_path / "t.jsonl"))
    reclaims = {r["session"]: r for r in report["reclaims"]}
    assert {s: (r["t"], r["rule"]) for s, r in reclaims.items()} == {
        s: (ts(at(RECLAIM)), "gpu-never-used") for s in BACK}
    assert {s: r["returned"] for s, r in reclaims.items()} == {
        "a/": "under_30m", "b/": "under_2h", "c/": "under_8h", "d/": "later", "e/": "never"}
    assert reclaims["a/"]["user_returned"] == ts(at(RECLAIM + 20)) and reclaims["e/"]["user_returned"] is None
    returned = {"under_30m": 1, "under_2h": 1, "under_8h": 1, "later": 1, "never": 1}
    assert report["by_rule"] == {"gpu-never-used": {
        "reclaims": 5, "gpu_hours_freed": 5 * 14.0, "users_interrupted": 4, "returned": returned}}
    assert (report["summary"]["users_interrupted"], report["summary"]["returned"]) == (4, returned)
    # idle-culler reclaims past 1 h on the stale hub activity (61 min): a back 79 min after it,
    # b 149 min, c 6 h, d 11 h
    culler = report["baselines"]["idle-culler"]
    assert (culler["users_interrupted"], culler["returned"]) == (
        4, {"under_30m": 0, "under_2h": 1, "under_8h": 2, "later": 1, "never": 1})
    text = format_report(report)
    assert "  gpu-never-used" in text and "users back after 0 / 1 / 2 / 1" in text




def test_the_first_busy_sample_after_the_reclaim_is_the_return(tmp_path):
    trace = Trace(hours=8, step=1).session("a/", stop=200, sample=back_at(None)) \
        .session("a/", start=300, sample=lambda m: back_at(0)(m + RECLAIM))
    report = backtest(trace.write(tmp_path / "t.jsonl"))
    first, = (r for r in report["reclaims"] if r["t"] == ts(at(RECLAIM)))
    assert (first["user_returned"], first["returned"]) == (ts(at(300)), "under_8h")


def test_buckets_bounds():
    t = START
    assert [bucket(t, t + dt.timedelta(minutes=m)) for m in (1, 29, 30, 119, 120, 479, 480, 2000)] == [
        "under_30m", "under_30m", "under_2h", "under_2h", "under_8h", "under_8h", "later", "later"]
    assert bucket(t, None) == "never"
