#!/usr/bin/env python
"""Benchmark: how long the store's calls hold the event loop, on a SQLite store the size a
busy hub's reaches.

The service calls the store directly from its asyncio loop (no thread): while a call runs,
no page is answered and no signal is read. This measures the calls of one cycle and of the
pages on a store holding --gpu-sessions sessions' observations for 14 days (the default
--observation-retention) at one cycle every 600 s (the z2jh chart's --cull-every), 20,000
audit records, 5,000 reclaims, 10,000 warnings and 500 intents, and prints the median and
the worst of --repeat runs of each, in milliseconds.

    .venv/bin/python benchmarks/store_queries.py [--gpu-sessions 200] [--repeat 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu_reclaim.policy.observations import Decision, Sample, Session, SessionSample  # noqa: E402
from jupyterhub_gpu_reclaim.store import Store  # noqa: E402
from jupyterhub_gpu_reclaim.store.schema import (AuditRow, IntentRow, ObservationRow,  # noqa: E402
                                                  ReclaimRow, WarningRow)

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def fill(store: Store, sessions: int) -> None:
    cycles = 14 * 86400 // 600
    with store.engine.begin() as conn:
        for c in range(cycles):
            t = (NOW - dt.timedelta(seconds=600 * (cycles - c)))
            conn.execute(sa.insert(ObservationRow),
                         [{"t": t, "kind": "sample", "session": f"user{i}/", "gpu_util": (0.0,)}
                          for i in range(sessions)])
        old = [(NOW - dt.timedelta(minutes=7 * k)) for k in range(20_000)]
        conn.execute(sa.insert(AuditRow), [{"t": t, "actor": f"user{k % 500}", "action": "keepalive",
                                            "session": f"user{k % 500}/", "detail": "{}"}
                                           for k, t in enumerate(old)])
        conn.execute(sa.insert(ReclaimRow), [{"session": f"user{k % 500}/", "episode": f"e{k}",
                                              "rule": "gpu-idle", "t": old[k * 4], "gpus": 1,
                                              "evidence": "{}", "finished_at": old[k * 4],
                                              "outcome": "stopped", "detail": ""}
                                             for k in range(5_000)])
        conn.execute(sa.insert(WarningRow), [{"session": f"user{k % 500}/", "rule": "gpu-idle",
                                              "episode": f"e{k}", "t": old[k * 2],
                                              "reclaim_at": old[k * 2], "channels": "[]",
                                              "cleared_at": old[k * 2] if k >= 100 else None}
                                             for k in range(10_000)])
        conn.execute(sa.insert(IntentRow), [{"session": f"user{k}/", "until": NOW,
                                             "set_at": old[k], "by": "", "cleared_at": None}
                                            for k in range(500)])


def timed(repeat: int, call) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-sessions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    n = args.gpu_sessions
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "store.sqlite")
        fill(store, n)
        rows = {t: store.engine.connect().execute(sa.text(f"select count(*) from {t}")).scalar()
                for t in ("observations", "audit", "reclaims", "warnings", "intents")}
        print(f"store: {rows}")
        sessions = [Session(id=f"user{i}/", user=f"user{i}", server="", gpus=1,
                            started=NOW - dt.timedelta(hours=3)) for i in range(n)]
        samples = [SessionSample(s.id, Sample(t=NOW, gpu_util=(0.0,))) for s in sessions]
        decisions = [Decision(session=s.id, action="keep", rule="gpu-busy", reason="busy")
                     for s in sessions[: n // 10]]
        week = NOW - dt.timedelta(days=7)
        calls = {
            "cycle: intents()": lambda: store.intents(),
            "cycle: exemptions(now)": lambda: store.exemptions(NOW),
            "cycle: open_warnings()": lambda: store.open_warnings(),
            f"cycle: record_observations({n} samples)": lambda: store.record_observations(
                NOW, samples, 0, sessions),
            f"cycle: record_decisions({len(decisions)})": lambda: store.record_decisions(decisions, NOW),
            "page: history(limit=50)": lambda: store.history(week, limit=50),
            "page: reclaims(since=7 days)": lambda: store.reclaims(week),
            "page: audit_log(limit=50)": lambda: store.audit_log(limit=50),
        }
        print(f"| call ({n} GPU sessions) | median ms | worst ms |\n|---|---|---|")
        for name, call in calls.items():
            median, worst = timed(args.repeat, call)
            print(f"| {name} | {median:.2f} | {worst:.2f} |")
        store.close()


if __name__ == "__main__":
    main()
