#!/usr/bin/env python
"""Benchmark: replaying a 30,000-line session trace through the real policy.

Run it as `.venv/bin/python benchmarks/backtest_speed.py [--lines N] [--seed S]`. It writes a
realistic trace with the test suite's generator (`tests/support/traces.py:generate_trace`:
training sessions, open-tab idlers, never-used GPUs, slow data loaders, exporter gaps,
multi-GPU sessions, intents, pressure, labels) into a temporary directory, then times
(a) reading and validating it and (b) the whole backtest with the default policy config,
best of 3, and prints the figures (wall time, and the backtest's CPU time: on a shared machine
the wall time is also the other processes') and the report's summary. Target (issue 3): < 10 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jupyterhub_gpu_reclaim.replay.backtest import backtest  # noqa: E402
from jupyterhub_gpu_reclaim.replay.trace import read_trace  # noqa: E402
from tests.support.traces import generate_trace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        lines = generate_trace(path, lines=args.lines, seed=args.seed)
        read_s, total_s, cpu_s, report = [], [], [], None
        for _ in range(args.repeat):
            t = time.perf_counter()
            n = sum(1 for _ in read_trace(path))
            read_s.append(time.perf_counter() - t)
            t, c = time.perf_counter(), time.process_time()
            report = backtest(path)
            total_s.append(time.perf_counter() - t)
            cpu_s.append(time.process_time() - c)
        assert n == lines
    s = report["summary"]
    print(f"trace: {lines} lines, {report['trace']['sessions']} sessions")
    print(f"read+validate: {min(read_s):.2f} s    backtest (read+replay+score): {min(total_s):.2f} s "
          f"(best of {args.repeat}; {lines / min(total_s):,.0f} lines/s)")
    print(f"backtest CPU time: {min(cpu_s):.2f} s (best of {args.repeat})    load average: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"summary: {s}")
    print(f"target < 10 s: {'met' if min(total_s) < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
