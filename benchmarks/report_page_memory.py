#!/usr/bin/env python
"""Benchmark: the service's memory and `/health` while the admin page's usage report reads a
big history from Prometheus (issue 36: a series list of 1.75 M series left the service at
2.3 GiB and stalled `/health` 1.4 s).

Run it as `.venv/bin/python benchmarks/report_page_memory.py [--other-series 200000]
[--code DIR]` after `benchmarks/report_month.py` has made its month's blocks (the same
arguments find them in --data-dir). Debian's Prometheus serves a copy of the month's blocks
and, beside them, another target's GPU series (a second cluster's dcgm-exporter:
--other-series series, each named by one of its user pods). A process stands for the service:
the real `/health` handler and the admin page's report (`web.usage_report.usage_report`, the
service's settings, an empty store, so that Prometheus has every day of the last 30) on a
tornado server, importing the package from --code (a checkout: the code before a change, to
compare), with the page's bound on reading Prometheus raised to PAGE_TIMEOUT (a month on a
loaded machine takes longer than its 60 s). For each case it measures that process's RSS before and after the page, its peak
(VmHWM), the page's time, and `/health` asked every 50 ms meanwhile (its slowest answer):

- the page without matchers: the other target's series make the list too long (refused);
- the page with `--prometheus-gpu-matchers` for the month's exporter (where the code knows
  them): the month's report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAY = 86400
OURS = 'job="nvidia-dcgm-exporter"'
PAGE_TIMEOUT = 600.0


def serve(code: Path, port: int, prometheus: str, now: float, days: int, matchers: str) -> None:
    """The service's stand-in (in its own process): /health and /report on 127.0.0.1:`port`."""
    sys.path.insert(0, str(code))
    import asyncio

    from tornado import web

    from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
    from jupyterhub_gpu_reclaim.store import Store
    from jupyterhub_gpu_reclaim.web import usage_report as page
    from jupyterhub_gpu_reclaim.web.monitoring import HealthHandler

    extra = {"prometheus_gpu_matchers": matchers} if matchers else {}
    settings = ServiceSettings(cull_every=60, prometheus_url=prometheus, **extra)
    page.PROMETHEUS_TIMEOUT = PAGE_TIMEOUT  # a month on a loaded machine takes longer than the page's 60 s

    class Report(web.RequestHandler):
        async def get(self) -> None:
            when = dt.datetime.fromtimestamp(now, dt.timezone.utc)
            report = await page.usage_report(store, settings, when, days)
            self.write({"held": report["totals"]["held"], "notes": report["notes"],
                        "sources": sorted({d["source"] for d in report["by_day"]})})

    async def run() -> None:
        web.Application([("/health", HealthHandler), ("/report", Report)]).listen(port, "127.0.0.1")
        await asyncio.Event().wait()

    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "reclaim.sqlite") as store:
        asyncio.run(run())


def other_target(path: Path, start: float, n: int) -> None:
    sys.path.insert(0, str(REPO))
    from tests.support.prometheus_history import end_file, write_family

    series = ((({"gpu": str(i % 8), "UUID": f"GPU-{i:08d}-1111-2222-3333-444444444444", "Hostname": f"lab-node-{i // 8}",
                 "modelName": "NVIDIA H100 80GB HBM3", "DCGM_FI_DRIVER_VERSION": "550.54.15",
                 "exported_container": "notebook", "exported_namespace": "jhub", "exported_pod": f"jupyter-lab{i}",
                 "namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-lab-{i // 8}",
                 "job": "lab-cluster-dcgm-exporter", "instance": f"10.9.{i // 2000}.{i % 250}:9400"}),
               [(start + 3600 * (1 + i % 600) + 7, 80.0)]) for i in range(n))
    with open(path, "w") as out:
        write_family(out, "DCGM_FI_DEV_GPU_UTIL", series)
        end_file(out)


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{key}:", 1)[1].split()[0]) / 1024


def get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def measure(code: Path, prometheus: str, now: float, days: int, matchers: str) -> str:
    sys.path.insert(0, str(REPO))
    from gpu_reclaim_sim.launch import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(code), str(port), prometheus, str(now), str(days),
                             matchers], stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get(base + "/health", 1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the service's stand-in did not start") from None
                time.sleep(0.2)
        time.sleep(1)
        before = rss_mib(proc.pid)
        slowest, done = [0.0], threading.Event()

        def poll() -> None:
            while not done.wait(0.05):
                t = time.monotonic()
                get(base + "/health", 60)
                slowest[0] = max(slowest[0], time.monotonic() - t)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        t = time.monotonic()
        answer = json.loads(get(base + "/report", 600))
        took = time.monotonic() - t
        done.set()
        poller.join()
        time.sleep(2)
        after, peak = rss_mib(proc.pid), rss_mib(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(10)
    said = answer["notes"][0][:160] if answer["notes"] else ""
    return (f"RSS {before:.0f} MiB before, {after:.0f} MiB after (peak {peak:.0f} MiB); the page {took:.1f} s, "
            f"/health at most {slowest[0] * 1000:.0f} ms; held {answer['held']:.2f} GPU-hours from "
            f"{'/'.join(answer['sources'])}; {said}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        code, port, prometheus, now, days, matchers = sys.argv[2:8]
        serve(Path(code), int(port), prometheus, float(now), int(days), matchers)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--users", type=int)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--scrape", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "gpu-reclaim-bench")
    parser.add_argument("--other-series", type=int, default=200_000, help="the other target's GPU series")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose package the service runs")
    args = parser.parse_args()
    args.users = args.users or 2 * args.gpus
    sys.path.insert(0, str(REPO))
    from benchmarks.report_month import GENERATOR_VERSION
    from tests.support.prometheus_history import create_blocks, history_prometheus

    key = f"gpus{args.gpus}-users{args.users}-days{args.days}-scrape{args.scrape}-seed{args.seed}-v{GENERATOR_VERSION}"
    cached = args.data_dir / key
    if not (cached / "history.json").exists():
        raise SystemExit(f"no blocks in {cached}: run benchmarks/report_month.py --history-only with these arguments")
    start = json.loads((cached / "history.json").read_text())["start"]
    now = start + args.days * DAY
    with tempfile.TemporaryDirectory(prefix="report-page-") as tmp:
        work = Path(tmp)
        shutil.copytree(cached / "data", work / "data")
        t = time.monotonic()
        if args.other_series:
            other_target(work / "other.om", start, args.other_series)
            create_blocks(work / "other.om", work / "data")
            (work / "other.om").unlink()
        print(f"history: the month's blocks ({key}) and {args.other_series:,} series of another target "
              f"({time.monotonic() - t:.0f} s to make); the service runs {args.code}", flush=True)
        with history_prometheus(work, ["--storage.tsdb.max-block-duration=1d"]) as url:
            print(f"without matchers: {measure(args.code, url, now, args.days, '')}", flush=True)
            if (args.code / "jupyterhub_gpu_reclaim" / "report" / "series_count.py").exists():  # it knows them
                print(f"with {OURS}: {measure(args.code, url, now, args.days, OURS)}", flush=True)
    print(f"machine: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
