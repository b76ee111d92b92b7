#!/usr/bin/env python
"""Benchmark: one reclaim cycle over 5,000 ready servers (`--servers`, `--gpu-share`; `--sizes`
for several into one table), side by side with jupyterhub-idle-culler's cycle on the same
(fake) hub.

Run it as `.venv/bin/python benchmarks/service_cycle.py` (about a minute at 5,000 servers;
`--sizes 1000,5000,10000,20000` for the table of docs/benchmarks.md). At each size it

1. starts one *fakes* process (its CPU is not the measured process's) serving, on three
   127.0.0.1 ports:
   - a hub REST API as JupyterHub 5 answers it: `GET /hub/api/` (version), `GET
     /hub/api/users?state=ready&limit=&offset=` with the pagination media type (page
     size capped at 200, JupyterHub's `api_page_max_limit`; `_pagination.next.url` built
     as the hub builds it), `GET /hub/api/users/NAME`, `DELETE .../server` (204),
     `GET /hub/api/user` (the service's scopes), and the probe-token API's `POST`/`DELETE
     /hub/api/gpu-reclaim/users/NAME/tokens[/ID]` and `GET /hub/api/gpu-reclaim/tokens` (the
     kernel-probe tokens, kept until deleted: the list at start shows what a run left). 5,000
     (`--servers`) users, each with one ready default server, all active in the last 30 minutes, so
     neither tool stops anything: what is timed is the decision cycle, not stops;
   - Prometheus `GET /api/v1/query`: the default query's answer (`field="util"` and
     `field="fb_used"` series, dcgm-exporter's labels renamed `exported_*` as with
     `honor_labels: false`) for the 1,000 GPU pods (`--gpu-share`, 1/5); one in 10 at 0 % (GPU-idle),
     the others busy;
   - the single-user servers' own `/user/NAME/api/kernels` and `/api/terminals` (one idle
     kernel, no terminal), reached at `PodInfo.direct_url`;
   - the Kubernetes API's pod list (`limit`/`continue`; a KubeSpawner-shaped pod a server, of
     about 2.9 KB of JSON each) and a pod watch that stays quiet until its timeout;
   and counting every request by kind;
2. runs each tool in its own fresh Python process (so that peak RSS compares), a warm-up
   cycle then `--cycles` timed cycles:
   - ours: `service.Reclaimer` with the real HubSignal (page size 200, concurrency 10),
     PrometheusSignal (default query), KernelSignal, HubStopper, a Dispatcher with a
     LogNotifier, a Store on a temporary SQLite file, `ServiceSettings` (the default policy and options
     but `--timeout` 3600 s, as idle-culler's run: `scene.CULL_TIMEOUT_S`) and
     the real PodSignal (kubernetes_asyncio list + watch) against the fake API; a second
     variant ("pods view pre-filled", `--pods fake` alone) replaces the pods signal by an
     in-process view holding the same `PodInfo` (built by `signals.pods.pod_info`),
     which is what `snapshot()` reads; the memory of that view is measured with tracemalloc;
   - jupyterhub-idle-culler 2.0's `cull_idle(...)` with the equivalent settings
     (`inactive_limit=3600, concurrency=10, api_page_size=200, cull_users=False`);
   3 rounds (`--rounds`), the tools alternating, timed cycles pooled;
3. prints a markdown table, the targets met or not, and where the first cycle's time went (its
   CPU seconds beside its wall time: the machine's load moves the latter)
   (and `--json` the raw results); with several sizes, one table of them all.

Both tools' processes read their modules' compiled bytecode from a cache the run fills
first (`BYTECODE_ENV`), as a deployed service reads what pip compiled. Logging is at WARNING
in both tool processes. The first cycle of ours writes every server's
first decision and every GPU server's session line to the store; it is reported apart.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.cycle.culler import run_culler  # noqa: E402
from benchmarks.cycle.fakes import serve_fakes  # noqa: E402
from benchmarks.cycle.ours import run_ours  # noqa: E402
from benchmarks.cycle.report import pooled, sizes_table, table, verdict  # noqa: E402
from benchmarks.cycle.scene import Scene  # noqa: E402
from benchmarks.support.process import machine  # noqa: E402


def tool_main(args: argparse.Namespace, scene: Scene) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    ports = json.loads(args.ports)
    runner = run_ours if args.tool == "ours" else run_culler
    result = asyncio.run(runner(ports, args.cycles, args.profile, args.pods, scene))
    decisions = {k: result.pop(k) for k in ("first_decisions", "last_decisions") if k in result}
    if args.decisions and decisions:  # ours' only
        with open(args.decisions, "w") as f:
            json.dump(decisions, f, indent=0, sort_keys=True)
    print(json.dumps(result))


def run_tool(tool: str, ports: dict[str, int], cycles: int, profile: str | None,
             pods: str, scene: Scene, decisions: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--tool", tool, "--ports", json.dumps(ports), "--cycles", str(cycles),
           "--pods", pods, *scene.args()]
    if profile:
        cmd += ["--profile", profile]
    if decisions:
        cmd += ["--decisions", decisions]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200, env=BYTECODE_ENV)
    if out.stderr.strip():
        sys.stderr.write(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


# The tools' modules compiled once into a cache both tools' processes read, as a deployed
# service reads the bytecode pip compiled into its image. This machine's venv is installed
# with --no-compile and PYTHONDONTWRITEBYTECODE=1 is set: every process would compile what
# it imports from source, which at start-up took 50 MiB more at its peak (kubernetes_asyncio's
# core_v1_api.py alone is 2.8 MB of source), held as RSS for the rest of the run.
BYTECODE_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), "bench-cycle-pycache")}


def warm_imports() -> None:
    """--warm-imports: import (and so compile into the cache) what both tools import."""
    import jupyterhub_idle_culler  # noqa: F401
    import tornado.simple_httpclient  # noqa: F401

    from jupyterhub_gpu_reclaim import launcher  # noqa: F401
    from jupyterhub_gpu_reclaim.service import cycle, hub_stopper, notify  # noqa: F401
    from jupyterhub_gpu_reclaim.signals import hub, kernels, kube_client, pods, prometheus  # noqa: F401
    from jupyterhub_gpu_reclaim.store import Store  # noqa: F401

    kube_client.load()


def run_size(args: argparse.Namespace, scene: Scene) -> dict[str, dict[str, Any]]:
    """Every variant's rounds on one fake hub of `scene`'s size, pooled."""
    tmp = tempfile.mkdtemp(prefix="bench-fakes-")
    port_file = os.path.join(tmp, "ports.json")
    fakes = subprocess.Popen([sys.executable, __file__, "--serve-fakes", port_file, *scene.args()])
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or fakes.poll() is not None:
                raise SystemExit("the fakes did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            ports = json.load(f)
        variants = {"culler": ("culler", "watch"), "ours": ("ours", args.pods)}
        if args.pods == "watch" and not args.no_fake_pods:
            variants["ours-prefilled"] = ("ours", "fake")
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for k in range(args.rounds):  # alternate the tools: a busy machine hurts both alike
            for tool, (kind, pods) in variants.items():
                first_round = k == 0
                profile = f"{args.profile}.{scene.servers}.{tool}" if args.profile and first_round else None
                decisions = (f"{args.decisions}.{scene.servers}.json"
                             if args.decisions and first_round and tool == "ours" else None)
                runs[tool].append(run_tool(kind, ports, args.cycles, profile, pods, scene, decisions))
                r = runs[tool][-1]
                print(f"{scene.servers} servers, round {k + 1} {tool}: first {r['first']:.2f} s "
                      f"(CPU {r['first_cpu']:.2f} s), cycles " + " ".join(f"{t:.2f}" for t in r["times"])
                      + " (CPU " + " ".join(f"{t:.2f}" for t in r["cpu"]) + f"), peak {r['VmHWM']:.0f} MiB",
                      file=sys.stderr)
    finally:
        fakes.terminate()
        fakes.wait(10)
    return {tool: pooled(r) for tool, r in runs.items()}


def print_size(scene: Scene, results: dict[str, dict[str, Any]]) -> None:
    ours, culler = results["ours"], results["culler"]
    print(table(ours, culler, results.get("ours-prefilled")))
    print()
    print(verdict(ours, culler, scene))
    print(f"\n- ours: {ours['servers']} servers, {ours['gpu_sessions']} with GPUs; decisions "
          f"{ours['decisions']}; pods view ({scene.servers:,} PodInfo) {ours['pods_view_mib']:.1f} MiB")
    for name in ("ours", "ours-prefilled"):
        r = results.get(name)
        if r:
            sp = r["first_spent"]
            print(f"- {name}, start-up (Kubernetes client import, pod list, the service's scopes) {r['startup']:.2f} s, "
                  f"then first cycle {r['first']:.2f} s: pods signal start {sp['pods_start']:.2f} s, "
                  f"decision log {sp['record_decision']:.2f} s, rest "
                  f"{r['first'] - sp['pods_start'] - sp['record_decision']:.2f} s; requests {r['first_counts']}")


def driver(args: argparse.Namespace, scenes: list[Scene]) -> None:
    print(f"Machine: {machine()}; {dt.date.today()}; load average {load()} at the start; "
          f"{args.rounds} rounds x {args.cycles} timed cycles per tool\n")
    subprocess.run([sys.executable, __file__, "--warm-imports"], check=True, env=BYTECODE_ENV, timeout=600)
    sizes = {}
    for scene in scenes:
        sizes[scene.servers] = results = run_size(args, scene)
        print(f"### {scene.servers:,} servers ({scene.gpu_servers:,} with GPUs)\n")
        print_size(scene, results)
        print()
    if len(scenes) > 1:
        print(sizes_table(scenes, sizes))
    print(f"\nload average {load()} at the end")
    if args.json:
        print(json.dumps(sizes, indent=1))


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def sizes(text: str) -> list[int]:
    """--sizes: server counts separated by commas."""
    return [int(n) for n in text.split(",")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=5, help="timed cycles after the warm-up one")
    p.add_argument("--rounds", type=int, default=3,
                   help="fresh processes per tool, alternating (cycles pooled)")
    p.add_argument("--pods", choices=("watch", "fake"), default="watch",
                   help="ours: the real PodSignal on a fake Kubernetes API (watch), or a "
                        "pre-filled in-process view (fake)")
    p.add_argument("--no-fake-pods", action="store_true",
                   help="do not also run ours with the pods view pre-filled")
    p.add_argument("--servers", type=int, default=Scene.servers,
                   help="users with one ready server each on the fake hub")
    p.add_argument("--gpu-share", type=Fraction, default=Scene.gpu_share,
                   help="the share of the servers with a GPU (a fraction: 1/5, 0.2)")
    p.add_argument("--sizes", type=sizes,
                   help="several sizes, one after the other, into one table: 1000,5000,10000,20000 "
                        "(each with --gpu-share; overrides --servers)")
    p.add_argument("--decisions", help="write ours' decisions of the first and the last cycle "
                                       "(each session's action and rule) to PATH.SERVERS.json")
    p.add_argument("--json", action="store_true", help="also print the raw results")
    p.add_argument("--profile", help="write cProfile stats (CPU time) of the timed cycles to PATH.SERVERS.ours "
                                     "/ .culler, and of ours' first cycle to PATH.SERVERS.ours.first")
    p.add_argument("--serve-fakes", help=argparse.SUPPRESS)
    p.add_argument("--warm-imports", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tool", choices=("ours", "culler"), help=argparse.SUPPRESS)
    p.add_argument("--ports", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not 0 <= args.gpu_share <= 1 or args.servers < 1 or any(n < 1 for n in args.sizes or ()):
        p.error("--servers and --sizes are counts of 1 or more, --gpu-share a share from 0 to 1")
    scenes = [Scene(n, args.gpu_share) for n in args.sizes or [args.servers]]
    if args.warm_imports:
        warm_imports()
    elif args.serve_fakes:
        serve_fakes(args.serve_fakes, scenes[0])
    elif args.tool:
        tool_main(args, scenes[0])
    else:
        driver(args, scenes)


if __name__ == "__main__":
    main()
