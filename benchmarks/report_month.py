#!/usr/bin/env python
"""Benchmark: `jupyterhub-gpu-reclaim report` on a month of a 200-GPU cluster at a 60 s step,
against Debian's Prometheus.

Run it as `.venv/bin/python benchmarks/report_month.py [--gpus 200] [--users 400] [--days 30] [--scrape 60]`.
It writes the cluster's history as the scheduler makes it and dcgm-exporter and
kube-state-metrics write it (benchmarks/support/cluster_history.py: pods landing on whichever
GPU is free, z2jh's pod names reused across sessions, kube-state-metrics upgraded half-way, a
request series that gains `node`, an exporter outage), one sample a series
every --scrape seconds, as OpenMetrics text; turns it into TSDB blocks with promtool; starts
Prometheus on a copy of them; then runs the report (`--json`, the default --max-series and
--max-samples) as its own process and prints its wall time, CPU time and peak memory (from its
rusage), Prometheus's CPU time during the report and its peak memory (/proc), the load average
while it ran, the queries made and the report's totals. CPU time is what to compare on a
shared machine: the wall time waits for cores.

The blocks are kept in --data-dir (default ~/.cache/gpu-reclaim-bench), one folder for each
set of the generator's arguments and GENERATOR_VERSION, and reused when present: a month
takes some 20 minutes of CPU to create. Prometheus runs on a copy (it writes into its TSDB),
with blocks of at most a day, so that it compacts none of them while the report runs.
`--profile FILE` writes a cProfile of the report (its thread work run inline, so that the
profile sees it; wall-clock time, which on a busy machine includes waiting for a core);
`--json-out FILE` keeps the report's JSON; `--history-only` makes the blocks and stops.

Sessions: each user asks for a GPU again 1 to 24 h after their last session ended (at night,
mostly the next morning), holds it
1 to 12 h, working in bursts (a few minutes to 2 h at 20-95 %, pauses at 0-0.5 %), some never
using the GPU, some waiting for a free GPU or pulling their image first. Target (issue 29): under a minute for 200 GPUs,
30 days, a 60 s step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.support.cluster_history import schedule, write_history  # noqa: E402
from tests.support.prometheus_history import create_blocks, history_prometheus  # noqa: E402

DAY = 86400
GENERATOR_VERSION = 4  # change it with anything the history's generator writes: it names the cached blocks
# the report as its own process under cProfile, asyncio.to_thread run inline (cProfile sees one thread)
PROFILED = """
import asyncio, cProfile, sys
from jupyterhub_gpu_reclaim.cli import main
async def inline(f, /, *a, **k):
    return f(*a, **k)
asyncio.to_thread = inline
cProfile.run("main(sys.argv[2:])", sys.argv[1])
"""


def history_blocks(args: argparse.Namespace) -> tuple[Path, int, str]:
    """The TSDB blocks of the history, created or reused from --data-dir: (their folder, the
    history's start, what it holds)."""
    key = f"gpus{args.gpus}-users{args.users}-days{args.days}-scrape{args.scrape}-seed{args.seed}-v{GENERATOR_VERSION}"
    cached = args.data_dir / key
    if (cached / "history.json").exists():
        meta = json.loads((cached / "history.json").read_text())
        return cached / "data", meta["start"], f"{meta['summary']} (blocks reused from {cached})"
    args.data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=args.data_dir))  # renamed once whole
    start = (int(time.time()) // DAY - args.days - 1) * DAY
    found = schedule(args.gpus, args.users, args.days, args.seed)
    waited = sum(1 for s in found if s.scheduled is None or s.scheduled - s.created > 30)
    samples = size = 0
    writing = building = 0.0
    for day in range(args.days):
        t0 = time.monotonic()
        samples += write_history(work / "history.om", start, found, args.gpus, args.days, args.scrape, args.seed, day)
        size += (work / "history.om").stat().st_size
        t1 = time.monotonic()
        create_blocks(work / "history.om", work / "data")
        (work / "history.om").unlink()
        writing, building = writing + t1 - t0, building + time.monotonic() - t1
    summary = (f"{args.gpus} GPUs, {args.users} users, {args.days} days, a sample every {args.scrape} s, "
               f"{len(found):,} sessions ({waited:,} waited for a GPU): "
               f"{samples:,} samples ({size / 1e6:.0f} MB of OpenMetrics) written in {writing:.0f} s; promtool's "
               f"blocks in {building:.0f} s")
    (work / "history.json").write_text(json.dumps({"start": start, "summary": summary}))
    work.rename(cached)
    return cached / "data", start, summary


def _pid_of(data: Path) -> int:
    """The Prometheus serving the TSDB `data`."""
    for proc in Path("/proc").iterdir():
        try:
            if f"--storage.tsdb.path={data}".encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                return int(proc.name)
        except (OSError, ValueError):
            continue
    raise RuntimeError(f"no Prometheus serving {data}")


def _cpu_s(pid: int) -> float:
    """A process's user and system CPU time so far, in seconds (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:", 1)[1].split()[0]) / 1024


class LoadAverage(threading.Thread):
    """The 1-minute load average, read every second while the report runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.seen.append(os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--users", type=int, help="users whose pods the scheduler places (default: twice --gpus)")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--scrape", type=int, default=60, help="seconds between samples of a series")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "gpu-reclaim-bench",
                        help="where the history's TSDB blocks are kept and reused")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the report here")
    parser.add_argument("--json-out", type=Path, help="keep the report's JSON here")
    parser.add_argument("--history-only", action="store_true", help="create the history's blocks (or find them), no report")
    args = parser.parse_args()
    args.users = args.users or 2 * args.gpus
    data, start, summary = history_blocks(args)
    print(f"history: {summary}", flush=True)
    if args.history_only:
        return
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        work = Path(tmp)
        shutil.copytree(data, work / "data")
        with history_prometheus(work, ["--storage.tsdb.max-block-duration=1d"]) as url:
            prometheus = _pid_of(work / "data")
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + args.days * DAY))
            report_args = ["report", "--prometheus-url", url, "--since", since, "--until", until, "--step", "60",
                           "--json"]
            command = ([sys.executable, "-c", PROFILED, str(args.profile), *report_args] if args.profile else
                       [str(Path(sys.executable).with_name("jupyterhub-gpu-reclaim")), *report_args])
            load = LoadAverage()
            load.start()
            prometheus_cpu = _cpu_s(prometheus)
            t3 = time.monotonic()
            with open(work / "report.json", "w") as out, open(work / "report.err", "w") as err:
                child = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=work)
                _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its CPU, its peak RSS
                child.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - t3
            prometheus_cpu = _cpu_s(prometheus) - prometheus_cpu
            load.done.set()
            prometheus_peak = _peak_mib(prometheus)
            if child.returncode != 0:
                raise SystemExit(f"the report failed ({child.returncode}): {(work / 'report.err').read_text()[-2000:]}")
            blocks = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
            report = json.loads((work / "report.json").read_text())
            if args.json_out:
                shutil.copyfile(work / "report.json", args.json_out)
        seen = load.seen or [os.getloadavg()[0]]
        print(f"report: {wall:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU "
              f"({usage.ru_utime:.1f} user), peak RSS {usage.ru_maxrss / 1024:.0f} MiB; {report['source']['queries']} "
              f"queries; Prometheus: {prometheus_cpu:.1f} s CPU during the report, peak RSS {prometheus_peak:.0f} MiB, "
              f"its TSDB {blocks / 1e6:.0f} MB; load average (1 min) {min(seen):.1f}-{max(seen):.1f} on "
              f"{os.cpu_count()} CPUs" + (f"; profile in {args.profile}" if args.profile else ""))
        print(f"totals: {json.dumps(report['totals'])}")
        print(f"queue: {json.dumps({k: v for k, v in report['queue'].items() if k != 'by_day'})}")
        print(f"estimate: {json.dumps({k: v for k, v in report['policy_estimate'].items() if k != 'assumed'})}")


if __name__ == "__main__":
    main()
