"""What benchmarks/service_cycle.py reads back: the fakes' request counters, and the
cycles' times summed up."""

from __future__ import annotations

import json
import statistics
import urllib.request


def fake_counters(hub: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{hub}/bench/counters", timeout=10) as r:
        return json.load(r)


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))
            if after.get(k, 0) - before.get(k, 0)}


def summary(times: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(times), "max": max(times), "min": min(times)}
