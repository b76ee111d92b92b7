#!/usr/bin/env python
"""Benchmark: `jupyterhub-gpu-reclaim report` on a month of a 200-GPU cluster at a 60 s step,
against Debian's Prometheus.

Run it as `.venv/bin/python benchmarks/report_month.py [--gpus 200] [--days 30] [--scrape 60]`.
It writes the cluster's history as dcgm-exporter (DCGM_FI_DEV_GPU_UTIL and
DCGM_FI_PROF_GR_ENGINE_ACTIVE of each GPU, with the holding pod's labels, as a ServiceMonitor
with honorLabels false stores them) and kube-state-metrics (kube_pod_labels,
kube_pod_status_phase, kube_pod_container_resource_requests) write it, one sample a series
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

Sessions: each GPU holds one user's pod after another (1 to 12 h, gaps of 0 to 6 h), each
working in bursts (a few minutes to 2 h at 20-95 %, pauses at 0-0.5 %), some never using the
GPU, some pending for a GPU before they start. Target (issue 29): under a minute for 200 GPUs,
30 days, a 60 s step.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.prometheus_history import create_blocks, end_file, history_prometheus, write_family  # noqa: E402

DAY = 86400
GPUS_PER_NODE = 8
GENERATOR_VERSION = 2  # change it with anything the history's generator writes: it names the cached blocks
# the report as its own process under cProfile, asyncio.to_thread run inline (cProfile sees one thread)
PROFILED = """
import asyncio, cProfile, sys
from jupyterhub_gpu_reclaim.cli import main
async def inline(f, /, *a, **k):
    return f(*a, **k)
asyncio.to_thread = inline
cProfile.run("main(sys.argv[2:])", sys.argv[1])
"""


def sessions(gpus: int, days: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for g in range(gpus):
        t = rng.uniform(0, 6) * 3600
        k = 0
        while t < days * DAY:
            length = rng.uniform(1, 12) * 3600
            pending = rng.uniform(60, 1800) if rng.random() < 0.2 else 0.0
            user = f"user{g}x{k % 2}"  # two users take turns on each GPU (a pod name is never on two GPUs at once)
            bursts = []
            if rng.random() > 0.15:  # 15 % never use the GPU
                b = t + rng.uniform(0, 3600)
                while b < t + length:
                    d = rng.uniform(300, 7200)
                    bursts.append((b, b + d, rng.uniform(20, 95)))
                    b += d + rng.uniform(300, 4 * 3600)
            out.append({"gpu": g, "pod": f"jupyter-{user}", "user": user, "start": t,
                        "end": min(t + length, days * DAY), "pending": pending, "bursts": bursts})
            t += length + rng.uniform(0, 6) * 3600
            k += 1
    return out


def write_history(path: Path, start: float, found: list[dict], scrape: int, seed: int, day: int) -> int:
    """The samples of UTC day `day` of the history (promtool reads its whole input once a block:
    one day a file keeps a month's build linear)."""
    samples = 0
    lo, hi = day * DAY, (day + 1) * DAY

    def ticks(a: float, b: float) -> range:
        a, b = max(a, lo), min(b, hi)
        return range(int(a // scrape) * scrape + 7 + (scrape if a % scrape > 7 else 0), int(b), scrape)

    with open(path, "w") as out:
        for metric, scale in (("DCGM_FI_DEV_GPU_UTIL", 1.0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01)):
            series = []
            for s in found:
                if s["end"] <= lo or s["start"] >= hi:
                    continue
                g = s["gpu"]
                labels = {"gpu": str(g % GPUS_PER_NODE), "UUID": f"GPU-{g:08d}-0000-0000-0000-000000000000",
                          "device": f"nvidia{g % GPUS_PER_NODE}", "modelName": "NVIDIA A100-SXM4-80GB",
                          "Hostname": f"gpu-node-{g // GPUS_PER_NODE}", "DCGM_FI_DRIVER_VERSION": "550.54.15",
                          "exported_container": "notebook", "exported_namespace": "jhub", "exported_pod": s["pod"],
                          "namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-{g // GPUS_PER_NODE}",
                          "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter",
                          "endpoint": "gpu-metrics", "job": "nvidia-dcgm-exporter",
                          "instance": f"10.1.{g // GPUS_PER_NODE}.1:9400"}
                run = s["start"] + s["pending"]
                bursts = s["bursts"]
                rng = random.Random(f"{seed}/{s['pod']}")  # the same in every process

                def util(t: float, bursts=bursts, rng=rng) -> float:
                    for a, b, u in bursts:
                        if a <= t < b:
                            return u
                    return rng.choice((0.0, 0.0, 0.0, 0.5))

                points = [(start + t, util(t) * scale) for t in ticks(run, s["end"])]
                samples += len(points)
                series.append((labels, points))
            write_family(out, metric, series)
        ksm = {"namespace": "monitoring", "pod": "kube-state-metrics-0", "job": "kube-state-metrics",
               "instance": "10.0.0.9:8080"}
        for metric in ("kube_pod_labels", "kube_pod_status_phase", "kube_pod_container_resource_requests"):
            series = []
            for s in found:
                if s["end"] <= lo or s["start"] >= hi:
                    continue
                base = {"exported_namespace": "jhub", "exported_pod": s["pod"], "uid": f"uid-{s['pod']}", **ksm}
                life = ticks(s["start"], s["end"])
                run = start + s["start"] + s["pending"]
                if metric == "kube_pod_labels":
                    series.append(({**base, "label_hub_jupyter_org_username": s["user"]},
                                   [(start + t, 1.0) for t in life]))
                elif metric == "kube_pod_status_phase":
                    for phase in ("Pending", "Running"):
                        series.append(({**base, "phase": phase},
                                       [(start + t, float((start + t < run) == (phase == "Pending"))) for t in life]))
                else:
                    series.append(({**base, "container": "notebook", "resource": "nvidia_com_gpu", "unit": "integer"},
                                   [(start + t, 1.0) for t in life]))
                samples += len(life) * (2 if metric == "kube_pod_status_phase" else 1)
            write_family(out, metric, series)
        end_file(out)
    return samples


def history_blocks(args: argparse.Namespace) -> tuple[Path, int, str]:
    """The TSDB blocks of the history, created or reused from --data-dir: (their folder, the
    history's start, what it holds)."""
    key = f"gpus{args.gpus}-days{args.days}-scrape{args.scrape}-seed{args.seed}-v{GENERATOR_VERSION}"
    cached = args.data_dir / key
    if (cached / "history.json").exists():
        meta = json.loads((cached / "history.json").read_text())
        return cached / "data", meta["start"], f"{meta['summary']} (blocks reused from {cached})"
    args.data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=args.data_dir))  # renamed once whole
    start = (int(time.time()) // DAY - args.days - 1) * DAY
    found = sessions(args.gpus, args.days, args.seed)
    samples = size = 0
    writing = building = 0.0
    for day in range(args.days):
        t0 = time.monotonic()
        samples += write_history(work / "history.om", start, found, args.scrape, args.seed, day)
        size += (work / "history.om").stat().st_size
        t1 = time.monotonic()
        create_blocks(work / "history.om", work / "data")
        (work / "history.om").unlink()
        writing, building = writing + t1 - t0, building + time.monotonic() - t1
    summary = (f"{args.gpus} GPUs, {args.days} days, a sample every {args.scrape} s, {len(found):,} sessions: "
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
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--scrape", type=int, default=60, help="seconds between samples of a series")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "gpu-reclaim-bench",
                        help="where the history's TSDB blocks are kept and reused")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the report here")
    parser.add_argument("--json-out", type=Path, help="keep the report's JSON here")
    parser.add_argument("--history-only", action="store_true", help="create the history's blocks (or find them), no report")
    args = parser.parse_args()
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
