#!/usr/bin/env python
"""Benchmark: the simulated cluster under 5,000 KubeSpawner-like pods.

Run it as `.venv/bin/python benchmarks/sim_scale.py` (or `make benchmarks`). It

1. starts the simulated cluster (`jupyterhub-gpu-reclaim-sim run`, scenario
   `gpu_reclaim_sim/scenarios/scale.yaml`: 50 CPU nodes and 10 GPU nodes x 8 GPUs, stub mode) as its own
   process, through `gpu_reclaim_sim.launch.start_sim`, and gives the ServiceAccount
   `hub` the z2jh chart's hub Role: every request below uses its token over HTTPS, with RBAC
   enforced, as a hub's requests do;
2. starts KubeSpawner's own pod reflector (`kubespawner.spawner.PodReflector`, configured
   as `KubeSpawner._start_watching_pods` configures it: namespace, label selector
   `component=singleuser-server`, KubeSpawner's shared client and `load_config`) in a
   second process, the way a hub runs it next to the cluster;
3. creates the pods through the Kubernetes API with kubernetes_asyncio (the pod manifests
   come from KubeSpawner's own `make_pod`), paced at a fixed rate with a bounded number of
   requests in flight, so that the latencies measure the server and not a client queue;
   each pod carries the wall-clock time at which its request was sent in an annotation;
4. measures create / get / list (all pods) / delete latency (lists after untimed warm-up
   lists, in a client that keeps the memory it frees: see `keep_freed_memory`), the lag from "request sent"
   to "the reflector has the pod" (and to "the reflector sees it Running", and to "the
   reflector has dropped it" after a delete), and the simulator's memory (VmRSS, VmHWM)
   and CPU time;
5. prints a markdown table and rewrites `docs/benchmarks.md` (unless `--no-docs`);
6. stops the simulator by its PID.

Nothing here changes the simulator. The reflector is KubeSpawner's class; the benchmark
only times its (re)lists and wraps its `resources` dict to note when pods arrive and leave
(see `_reflect` in `benchmarks/scale/reflector.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without an installed package
    sys.path.insert(0, str(REPO))

from gpu_reclaim_sim.launch import start_sim  # noqa: E402  (no Kubernetes client imported)

# NOTE: kubernetes_asyncio and kubespawner are imported only after KUBECONFIG is set
# (kubernetes_asyncio reads it at import time, KubeSpawner's load_config when called);
# the modules of benchmarks/scale/ import them only inside their functions.
from benchmarks.scale.docs_section import DOCS, write_docs  # noqa: E402
from benchmarks.scale.hub_account import service_account_kubeconfig  # noqa: E402
from benchmarks.scale.report import interpretation, tables  # noqa: E402
from benchmarks.scale.run import run_benchmark  # noqa: E402
from benchmarks.scale.scene import SCENARIO  # noqa: E402
from benchmarks.support.process import cpu_steal_seconds, keep_freed_memory  # noqa: E402


def _at_least(low: float, kind: type = int):
    """An argparse type: a number of `kind` no smaller than `low` (a count, a rate, a pause),
    so that a negative one is refused before a cluster starts, not silently clipped."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: not a{'n integer' if kind is int else ' number'}") from None
        if not value >= low:  # NaN too
            raise argparse.ArgumentTypeError(f"{text}: must be {low:g} or more")
        return value
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    count, one_or_more, non_negative = _at_least(0), _at_least(1), _at_least(0.0, float)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--pods", type=count, default=5000, help="pods to create")
    p.add_argument("--rate", type=non_negative, default=100.0,
                   help="creates (and deletes) started per second; 0 = as fast as the slots allow")
    p.add_argument("--concurrency", type=one_or_more, default=4, help="requests in flight at most")
    p.add_argument("--gets", type=count, default=2000, help="get requests (random pods)")
    p.add_argument("--get-rate", type=non_negative, default=200.0, help="gets started per second")
    p.add_argument("--lists", type=count, default=20, help="full lists of all pods")
    p.add_argument("--warmup-lists", type=count, default=2,
                   help="untimed lists of each kind before the timed ones (and before the floor's)")
    p.add_argument("--list-pause", type=non_negative, default=0.2, help="seconds between lists")
    p.add_argument("--settle-timeout", type=non_negative, default=120.0,
                   help="seconds to wait for the reflector to see all pods Running / all gone")
    p.add_argument("--keep-pods", action="store_true", help="skip the delete phase")
    p.add_argument("--workdir", help="where the simulator's files go (default: a temporary directory)")
    p.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.relative_to(REPO)}")
    p.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    kept = keep_freed_memory()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-reclaim-bench-"))
    print(f"starting the simulated cluster ({SCENARIO.relative_to(REPO)}) in {workdir} ...", flush=True)
    steal0 = cpu_steal_seconds()
    t0 = time.monotonic()
    sim = start_sim(workdir, SCENARIO, timeout=120)
    sim_start_seconds = time.monotonic() - t0
    try:
        # before kubernetes_asyncio is imported; the reflector process inherits it
        os.environ["KUBECONFIG"] = str(service_account_kubeconfig(sim, workdir))
        res = asyncio.run(run_benchmark(args, sim))
    finally:
        code = sim.stop()
        print(f"simulator (PID {sim.proc.pid}) stopped with exit status {code}", flush=True)
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    res["get_rate"] = args.get_rate
    res["sim_start_seconds"] = sim_start_seconds
    res["warmup_lists"], res["client_keeps_freed_memory"] = args.warmup_lists, kept
    res["total_seconds"] = time.monotonic() - started
    res["steal_seconds"] = cpu_steal_seconds() - steal0
    table, met = tables(res)
    interp = interpretation(res, met)
    command = ".venv/bin/python benchmarks/sim_scale.py" + (
        " " + " ".join(shlex.quote(a) for a in argv) if argv else
        (" " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if argv is None and sys.argv[1:] else ""))
    print()
    print(table)
    print()
    print(interp)
    print(f"\n(simulator start {sim_start_seconds:.1f} s; whole benchmark {res['total_seconds']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    if not args.no_docs:
        write_docs(res, table, interp, command)
        print(f"wrote {DOCS.relative_to(REPO)}")
    # the exit status says whether the benchmark ran, not whether the targets were met
    return 1 if res["errors"] or not res["all_running_seconds"] or res["never_seen"] else 0


if __name__ == "__main__":
    sys.exit(main())
