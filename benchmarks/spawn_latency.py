#!/usr/bin/env python
"""Benchmark: spawn latency with and without image-locality affinity (the school hub's case in docs/benchmarks.md).

Run it as `.venv/bin/python benchmarks/spawn_latency.py`. First it measures the notebook
server's start-up after its pod is Ready, which stub mode does not have: on the simulated
cluster in process mode (`gpu_reclaim_sim/scenarios/cluster.yaml`, real `jupyterhub-singleuser`) with a
real JupyterHub, it starts a few servers whose image is on the node and takes the median of
pod Ready → the hub reports the server ready (`--startup-seconds S` uses S instead). The
user-visible spawn time (`user_visible_*`) is the pod-Ready time plus that start-up;
`seed_calibrated_*` is the pod-Ready time with the start-up overheads the school hub's report (docs/benchmarks.md) logged on its
own cluster instead (`seed_calibrated`). Then, for each arm, in sequence, it

1. starts a fresh simulated cluster (`gpu_reclaim_sim/scenarios/autoscaling.yaml`: two nodes that hold
   the 5 GB notebook image and 3 users each, three user placeholders, an autoscaler that
   adds image-less nodes after 30 s, pulls at 250 MB/s = 20 s for 5 GB, stub mode) through
   `gpu_reclaim_sim.launch.start_sim`;
2. in a child process (KubeSpawner's reflectors and clients are per process), creates one
   real spawner per user — `KubeSpawner` for `baseline`, `GPUReclaimSpawner` with
   `image_locality = "auto"` for `image_locality` — the way KubeSpawner's own tests do
   without a hub (`_mock=True`: a stand-in Hub object; a small User object), and calls
   `await spawner.start()`, which builds the pod (`get_pod_manifest`), creates it and waits
   until KubeSpawner's pod reflector sees it running. Users arrive one by one at a fixed
   interval, the same schedule in both arms;
3. after all spawns, reads each user pod and its events back from the API and computes
   the timings with `jupyterhub_gpu_reclaim.spawner.timings.extract` (the same code in both
   arms; `requested` is the moment `start()` was called), and the wait for the image: the
   Pulled event's "(… including waiting)" time of the notebook container, i.e. the pull
   itself plus the wait behind another pod's pull of the image on that node;
4. prints one JSON object: for `baseline` and `image_locality`, `spawns`, `p50_s`, `p95_s`,
   `max_s` (requested → Ready) and `image_pull_waits` (spawns that waited ≥ 1 s for a
   pull), plus details under other keys.

At each spawn request the benchmark also lists nodes and pods and notes which nodes held
the image and whether one of them could take the pod counting preemptible placeholders
(`jupyterhub_gpu_reclaim.spawner.affinity.candidates_and_fits`, what `auto` decides on), so
that a pull can be told apart from an unavoidable one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpu_reclaim_sim.launch import start_sim  # noqa: E402  (no Kubernetes client imported)
from gpu_reclaim_sim.network import namespace  # noqa: E402

from benchmarks.spawn.arm import run_arm  # noqa: E402
from benchmarks.spawn.scene import ARMS, SCENARIO, SIM_START_S, TARGET_P95_S  # noqa: E402
from benchmarks.spawn.startup import measure_server_startup  # noqa: E402
from benchmarks.spawn.summary import seed_calibrated, summarize  # noqa: E402
from benchmarks.support.process import machine  # noqa: E402


def run_arm_in_child(arm: str, workdir: Path, users: int, interval: float, prepuller: bool) -> dict[str, Any]:
    sim = start_sim(workdir / arm, SCENARIO, SIM_START_S)
    try:
        env = dict(os.environ, KUBECONFIG=sim.info["kubeconfig"])
        out = workdir / arm / "result.json"
        log = open(workdir / arm / "spawners.log", "wb")
        subprocess.run([sys.executable, __file__, "--arm", arm, "--users", str(users),
                        "--interval", str(interval), "--out", str(out),
                        *([] if prepuller else ["--no-prepuller"])],
                       env=env, check=True, stdout=log, stderr=subprocess.STDOUT, timeout=900)
        return json.loads(out.read_text())
    finally:
        sim.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=12, help="students arriving (default 12)")
    ap.add_argument("--interval", type=float, default=20.0, help="seconds between arrivals (default 20)")
    ap.add_argument("--no-prepuller", action="store_true",
                    help="without the emulated z2jh continuous image puller (new nodes get the "
                         "image only when a user pod pulls it)")
    ap.add_argument("--workdir", help="keep the clusters' logs here (default: a temporary directory)")
    ap.add_argument("--details", action="store_true", help="include every spawn in the JSON")
    ap.add_argument("--measure-startup", action=argparse.BooleanOptionalAction, default=True,
                    help="measure the notebook server's start-up after its pod is Ready on the "
                         "real stack (process-mode cluster + JupyterHub) and add it to the pod "
                         "times as the user-visible spawn time (default: on)")
    ap.add_argument("--startup-seconds", type=float, metavar="S",
                    help="skip the measurement and take S seconds as the server's start-up")
    ap.add_argument("--startup-samples", type=int, default=5,
                    help="servers started for the measurement (default 5; the median counts)")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # child process
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        import logging
        logging.basicConfig(level=logging.INFO)
        result = asyncio.run(run_arm(args.arm, args.users, args.interval, not args.no_prepuller))
        Path(args.out).write_text(json.dumps(result, default=str))
        return
    measure = args.startup_seconds is None and args.measure_startup
    if measure and not namespace.inside() and namespace.available():
        # the start-up's hub reaches its servers at their pods' addresses, which are local only
        # in a run's network namespace: the whole benchmark moves into one of its own
        os.execv(sys.executable, [sys.executable, "-m", "gpu_reclaim_sim.network.namespace", sys.executable, *sys.argv])
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spawn-latency-"))
    started = time.time()
    if args.startup_seconds is not None:
        startup: dict[str, Any] = {"server_startup_s": args.startup_seconds, "method": "given (--startup-seconds)"}
    elif measure:
        startup = measure_server_startup(workdir, args.startup_samples)
    else:
        startup = {"server_startup_s": 0.0, "method": "not measured (--no-measure-startup)"}
    startup_s = float(startup["server_startup_s"])
    arms = {arm: run_arm_in_child(arm, workdir, args.users, args.interval, not args.no_prepuller)
            for arm in ARMS}
    report: dict[str, Any] = {arm: summarize(arms[arm], startup_s) for arm in ARMS}
    report["server_startup_s"] = startup_s
    il, base = report["image_locality"], report["baseline"]
    # the target on pod-Ready time, on user-visible time and on seed-calibrated time
    no_avoidable = il["image_pull_waits_while_holder_could_take"] == 0
    target: dict[str, Any] = {"p95_s_max": TARGET_P95_S, "no_pull_wait_while_holder_could_take": no_avoidable}
    for measure, met in (("p95", "met"), ("user_visible_p95", "met_user_visible"),
                         ("seed_calibrated_p95", "met_seed_calibrated")):
        il_within = il[f"{measure}_s"] <= TARGET_P95_S
        base_within = base[f"{measure}_s"] <= TARGET_P95_S
        target[f"image_locality_{measure}_within"] = il_within
        target[f"baseline_{measure}_within"] = base_within
        target[met] = no_avoidable and il_within and not base_within
    report["target"] = target
    report["server_startup"] = {k: v for k, v in startup.items() if k != "runs"}
    report["scenario"] = {"file": str(SCENARIO.relative_to(REPO)), "users": args.users,
                          "interval_s": args.interval,
                          "continuous_image_puller": not args.no_prepuller, "workdir": str(workdir)}
    report["per_user"] = {arm: [
        {"user": s["user"], "offset_s": s.get("offset_s"), "total_s": (s.get("phases") or {}).get("total"),
         "seed_calibrated_s": round(seed_calibrated(s["phases"]["total"]), 1) if "total" in (s.get("phases") or {}) else None,
         "start_returned_s": s.get("start_returned_s"), "node": s.get("node"), "pull_wait_s": s.get("pull_wait_s"), "affinity": s.get("affinity"),
         "holders_that_fit_at_request": len(s["at_request"]["holders_that_fit"]) if s.get("at_request") else None,
         **({"error": s["error"]} if "error" in s else {})}
        for s in arms[arm]["spawns"]] for arm in ARMS}
    report["nodes_at_end"] = {arm: arms[arm]["nodes_at_end"] for arm in ARMS}
    if args.details:
        report["details"] = arms
        report["server_startup"]["runs"] = startup.get("runs")
    report["machine"] = machine()
    report["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
