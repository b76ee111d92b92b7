"""How the usage report page lays out the report's figures: a run of empty days as one
row, the share of each row's GPU time that was used, and the idle leaderboard (who
held GPUs idle the longest, as gpu-pruner's dashboard ranks them). The downloads keep every
day and every figure as they are."""

from __future__ import annotations

from typing import Any

LEADERBOARD_SIZE = 10


def share_used(row: dict[str, Any]) -> int | None:
    """The percent of the GPU time held that was used (rounded); None when none was held."""
    return round(100 * row["used"] / row["held"]) if row.get("held") else None


def _empty(row: dict[str, Any]) -> bool:
    """Nothing on the day: no GPU held, waited for or freed, no wait or start counted."""
    return not (row["held"] or row["gpu_hours_waited"] or row["gpu_hours_freed"] or row.get("waits")
                or row.get("starts"))


def day_rows(by_day: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The days, oldest first, a run of empty days of one source (no data, or nothing on
    them) as one row {"empty": True, "source", "first", "last", "days"}; every other day
    as it is."""
    out: list[dict[str, Any]] = []
    for row in by_day:
        if not _empty(row):
            out.append({**row, "empty": False})
        elif out and out[-1]["empty"] and out[-1]["source"] == row["source"]:
            out[-1].update(last=row["day"], days=out[-1]["days"] + 1)
        else:
            out.append({"empty": True, "source": row["source"], "first": row["day"], "last": row["day"], "days": 1})
    return out


def idle_leaderboard(by_user: list[dict[str, Any]], size: int = LEADERBOARD_SIZE) -> list[dict[str, Any]]:
    """The users who held GPUs idle the longest in the period, most first (those with none
    left out), at most `size`."""
    idle = sorted((r for r in by_user if r["idle"] > 0), key=lambda r: (-r["idle"], r["user"]))
    return idle[:size]
