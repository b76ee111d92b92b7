"""How the usage report page lays out its figures: runs of empty days as one row (of one
source), the share used, the idle leaderboard; and the what-if's settings in words."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.web.render import setting_text
from jupyterhub_gpu_reclaim.web.report_view import day_rows, idle_leaderboard, share_used


def day(n: int, source: str, held: float = 0.0, **kw) -> dict:
    return {"day": f"2026-12-{n:02d}", "source": source, "held": held, "used": kw.pop("used", 0.0),
            "gpu_hours_waited": 0.0, "gpu_hours_freed": 0.0, "waits": None, "starts": None, **kw}


def test_empty_days_of_one_source_are_one_row():
    days = [day(1, "none"), day(2, "none"), day(3, "prometheus"), day(4, "prometheus", waits=1),
            day(5, "record"), day(6, "record", held=2.0, used=0.5), day(7, "record"), day(8, "record")]
    rows = day_rows(days)
    assert [(r["empty"], r.get("first"), r.get("last"), r.get("days")) for r in rows] == [
        (True, "2026-12-01", "2026-12-02", 2), (True, "2026-12-03", "2026-12-03", 1), (False, None, None, None),
        (True, "2026-12-05", "2026-12-05", 1), (False, None, None, None), (True, "2026-12-07", "2026-12-08", 2)]
    assert rows[4]["held"] == 2.0 and share_used(rows[4]) == 25 and share_used(days[0]) is None


def test_the_idle_leaderboard_ranks_who_held_gpus_idle_longest():
    users = [{"user": u, "idle": i, "held": 10.0, "used": 10.0 - i}
             for u, i in (("ann", 1.0), ("bo", 0.0), ("cy", 5.0), ("di", 5.0))]
    assert [r["user"] for r in idle_leaderboard(users)] == ["cy", "di", "ann"]  # none idle: left out
    assert [r["user"] for r in idle_leaderboard(users, size=1)] == ["cy"]


def test_settings_read_as_they_were_set():
    assert setting_text("idle_reclaim_after", 180) == "3 min" and setting_text("warning_lead", 90) == "1 min 30 s"
    assert setting_text("max_age", None) == "none" and setting_text("gpu_idle_threshold", 9.0) == "9.0"
    assert setting_text("exempt_users", ["alice", "bob"]) == "alice, bob" and setting_text("exempt_users", []) == "none"
    assert setting_text("pressure_only", False) == "false"
