#!/usr/bin/env python
"""Benchmark: spawn latency with and without image-locality affinity (seed 2).

Run it as `.venv/bin/python benchmarks/spawn_latency.py`. For each arm, in sequence, it

1. starts a fresh simulated cluster (`examples/sim/autoscaling.yaml`: two nodes that hold
   the 5 GB notebook image and 3 users each, three user placeholders, an autoscaler that
   adds image-less nodes after 30 s, pulls at 250 MB/s = 20 s for 5 GB, stub mode) through
   `jupyterhub_gpu_reclaim.launch.start_sim`;
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
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from jupyterhub_gpu_reclaim.launch import start_sim  # noqa: E402  (no Kubernetes client imported)

SCENARIO = REPO / "examples" / "sim" / "autoscaling.yaml"
NAMESPACE = "jhub"
IMAGE = "quay.io/jupyter/datascience-notebook:2025-06-02"
ARMS = ("baseline", "image_locality")
PULL_WAIT_S = 1.0  # CACHED_PULL_SECONDS in spawner/timings.py: shorter is a manifest check
TARGET_P95_S = 20.0


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# --- one arm, in a child process ------------------------------------------------------------

class User:
    """What KubeSpawner reads of a JupyterHub User (name, id, url)."""

    def __init__(self, name: str, uid: int) -> None:
        self.name, self.id = name, uid
        self.url = f"/user/{name}/"
        self.escaped_name = name


def spawner_config(arm: str) -> Any:
    from traitlets.config import Config

    c = Config()
    k = c.KubeSpawner
    k.namespace = NAMESPACE
    k.image = IMAGE
    k.image_pull_policy = "IfNotPresent"
    k.cpu_guarantee = 1.0
    k.mem_guarantee = "5G"  # KubeSpawner's G is 2**30: 5Gi, as the placeholders ask
    k.priority_class_name = "jhub-default-priority"  # z2jh sets it with podPriority enabled
    k.node_selector = {"hub.jupyter.org/node-purpose": "user"}
    k.start_timeout = 600
    k.k8s_api_request_timeout = 10
    if arm == "image_locality":
        c.GPUReclaimSpawner.image_locality = "auto"
    return c


async def snapshot_holders(api: Any, requests: dict) -> dict[str, Any]:
    """Which nodes hold the image now, and which of them could take a user pod counting
    the room lower-priority pods (placeholders) would free."""
    from jupyterhub_gpu_reclaim.spawner import affinity

    nodes_raw = json.loads(await (await api.list_node(_preload_content=False)).read())["items"]
    pods_raw = json.loads(await (await api.list_pod_for_all_namespaces(_preload_content=False)).read())["items"]
    index = affinity.ImageIndex()
    nodes = {}
    for n in nodes_raw:
        index.update(n)
        nodes[n["metadata"]["name"]] = n
    by_node: dict[str, list] = {}
    for p in pods_raw:
        if (p.get("spec") or {}).get("nodeName"):
            by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    holders = index.nodes_with(IMAGE)
    candidates, fits = affinity.candidates_and_fits(
        holders, nodes, by_node, requests, 0, [], {"hub.jupyter.org/node-purpose": "user"}, [])
    return {"nodes": sorted(nodes), "holders": sorted(holders), "holders_that_fit": fits}


_INCLUDING = re.compile(r"\(([0-9.hmsµun]+) including waiting\)")


def pull_wait_seconds(pod: dict, events: list[dict]) -> float:
    """How long the notebook container waited for its image: the Pulled event's
    "(X including waiting)", else Pulling → Pulled; 0 when it was already present."""
    from jupyterhub_gpu_reclaim.spawner import timings as T

    mine = [e for e in T.pod_events(pod, events)
            if (e.get("involvedObject") or {}).get("fieldPath") in (None, "spec.containers{notebook}")]
    pulled = [e for e in mine if e.get("reason") == "Pulled" and not T.is_already_present(e)]
    if not pulled:
        return 0.0
    m = _INCLUDING.search(T.event_message(pulled[0]))
    if m:
        return T.parse_go_duration(m.group(1)) or 0.0
    pulling = [e for e in mine if e.get("reason") == "Pulling"]
    a, b = (T.event_first_time(pulling[0]) if pulling else None), T.event_first_time(pulled[0])
    return (b - a).total_seconds() if a and b else 0.0


PULLER_PREFIX = "continuous-image-puller-"


async def continuous_image_puller(api: Any) -> None:
    """z2jh's prePuller.continuous (on by default): a DaemonSet whose pod on every node pulls
    the user image as soon as the node joins. The simulator runs no DaemonSets, so this
    loop creates the same pod for each node it sees: bound to the node, tolerating every
    taint, requesting nothing (it takes no room from users or placeholders), running the
    user image (stub mode: no process) so that the kubelet pulls it."""
    done: set[str] = set()
    while True:
        try:
            nodes = json.loads(await (await api.list_node(_preload_content=False)).read())["items"]
            for n in nodes:
                name = n["metadata"]["name"]
                if name in done:
                    continue
                await api.create_namespaced_pod(NAMESPACE, {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": PULLER_PREFIX + name,
                                 "labels": {"component": "continuous-image-puller"}},
                    "spec": {"nodeName": name, "tolerations": [{"operator": "Exists"}],
                             "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "image-pull-singleuser", "image": IMAGE,
                                             "imagePullPolicy": "IfNotPresent"}]}})
                done.add(name)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # keep trying, as a DaemonSet controller would
            print(f"image puller: {e}", file=sys.stderr)
        await asyncio.sleep(0.5)


async def run_arm(arm: str, users: int, interval: float, prepuller: bool) -> dict[str, Any]:
    from kubespawner import KubeSpawner
    from kubespawner.clients import shared_client

    from jupyterhub_gpu_reclaim.spawner import GPUReclaimSpawner
    from jupyterhub_gpu_reclaim.spawner import timings as T

    cls = GPUReclaimSpawner if arm == "image_locality" else KubeSpawner
    config = spawner_config(arm)
    spawners = [cls(_mock=True, user=User(f"student{i + 1:02d}", i + 1), config=config,
                    api_token=f"token-{i}", oauth_client_id=f"client-{i}") for i in range(users)]
    api = shared_client("CoreV1Api")
    requests = {"cpu": 1, "memory": 5 * 2**30}
    # let the placeholders settle before the class starts
    for _ in range(100):
        pods = json.loads(await (await api.list_namespaced_pod(NAMESPACE, _preload_content=False)).read())["items"]
        ph = [p for p in pods if p["metadata"]["name"].startswith("user-placeholder")]
        if len(ph) == 3 and all(p["status"].get("phase") == "Running" for p in ph):
            break
        await asyncio.sleep(0.2)
    puller = asyncio.ensure_future(continuous_image_puller(api)) if prepuller else None
    results: list[dict[str, Any]] = [{} for _ in spawners]
    t0 = time.monotonic()

    async def one(i: int, sp: Any) -> None:
        await asyncio.sleep(max(0.0, t0 + i * interval - time.monotonic()))
        at_request = await snapshot_holders(api, requests)
        requested = dt.datetime.now(dt.timezone.utc)
        wall0 = time.monotonic()
        r = results[i]
        r.update(user=sp.user.name, offset_s=round(wall0 - t0, 2), at_request=at_request,
                 requested=requested)
        try:
            await asyncio.wait_for(sp.start(), 600)
            r["start_returned_s"] = round(time.monotonic() - wall0, 2)
        except Exception as e:  # a failed spawn is reported, not hidden
            r["error"] = f"{type(e).__name__}: {e}"

    await asyncio.gather(*(one(i, sp) for i, sp in enumerate(spawners)))
    await asyncio.sleep(1)
    if puller is not None:
        puller.cancel()
        await asyncio.gather(puller, return_exceptions=True)
    pods = {p["metadata"]["name"]: p for p in json.loads(await (await api.list_namespaced_pod(
        NAMESPACE, _preload_content=False)).read())["items"]}
    events = json.loads(await (await api.list_namespaced_event(NAMESPACE, _preload_content=False)).read())["items"]
    nodes_end = json.loads(await (await api.list_node(_preload_content=False)).read())["items"]
    out_spawns = []
    for sp, r in zip(spawners, results):
        pod = pods.get(sp.pod_name)
        rec: dict[str, Any] = {k: v for k, v in r.items() if k != "requested"}
        if pod is not None:
            t = T.extract(pod, events, r["requested"])
            wait = pull_wait_seconds(pod, events)
            rec.update(node=pod["spec"].get("nodeName"), phases={k: round(v, 2) for k, v in t.phases().items()},
                       image_pulled=t.image_pulled, pull_wait_s=round(wait, 2),
                       waited_for_pull=wait >= PULL_WAIT_S,
                       preempted_placeholder=bool(pod["status"].get("nominatedNodeName")) or any(
                           e.get("reason") == "Preempted" and f"{NAMESPACE}/{sp.pod_name}" in (e.get("message") or "")
                           for e in events))
            if isinstance(sp, GPUReclaimSpawner) and sp.spawn_timings is not None:
                rec["spawner_total_s"] = round(sp.spawn_timings.phases().get("total", math.nan), 2)
            aff = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
            req = (aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
            pref = aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            rec["affinity"] = "require" if req else "prefer" if pref else "none"
        out_spawns.append(rec)
    for sp in spawners:
        try:
            await sp.stop(now=True)
        except Exception:
            pass
    return {"arm": arm, "spawns": out_spawns,
            "nodes_at_end": [n["metadata"]["name"] for n in nodes_end],
            "preempted_events": sum(1 for e in events if e.get("reason") == "Preempted"),
            "scale_ups": sorted({e.get("message", "") for e in events if e.get("reason") == "TriggeredScaleUp"})}


def summarize(arm_result: dict[str, Any]) -> dict[str, Any]:
    spawns = arm_result["spawns"]
    ok = [s for s in spawns if "phases" in s and "total" in s["phases"] and "error" not in s]
    totals = sorted(s["phases"]["total"] for s in ok)
    waits = [s for s in ok if s["waited_for_pull"]]
    wall = sorted(s["start_returned_s"] for s in ok if "start_returned_s" in s)
    return {
        "spawns": len(ok),
        "p50_s": round(percentile(totals, 0.50), 1),
        "p95_s": round(percentile(totals, 0.95), 1),
        "max_s": round(totals[-1], 1) if totals else math.nan,
        "image_pull_waits": len(waits),
        "image_pull_waits_while_holder_existed": sum(1 for s in waits if s["at_request"]["holders"]),
        "image_pull_waits_while_holder_could_take": sum(1 for s in waits if s["at_request"]["holders_that_fit"]),
        "failed": len(spawns) - len(ok),
        # the same spans by the clock of the benchmark: start() called → start() returned
        "start_returned_p50_s": round(percentile(wall, 0.50), 1),
        "start_returned_p95_s": round(percentile(wall, 0.95), 1),
    }


# --- the parent ---------------------------------------------------------------------------

def run_arm_in_child(arm: str, workdir: Path, users: int, interval: float, prepuller: bool) -> dict[str, Any]:
    sim = start_sim(workdir / arm, SCENARIO)
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


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model or platform.processor()}, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=12, help="students arriving (default 12)")
    ap.add_argument("--interval", type=float, default=20.0, help="seconds between arrivals (default 20)")
    ap.add_argument("--no-prepuller", action="store_true",
                    help="without the emulated z2jh continuous image puller (new nodes get the "
                         "image only when a user pod pulls it)")
    ap.add_argument("--workdir", help="keep the clusters' logs here (default: a temporary directory)")
    ap.add_argument("--details", action="store_true", help="include every spawn in the JSON")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # child process
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        import logging
        logging.basicConfig(level=logging.INFO)
        result = asyncio.run(run_arm(args.arm, args.users, args.interval, not args.no_prepuller))
        Path(args.out).write_text(json.dumps(result, default=str))
        return
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spawn-latency-"))
    started = time.time()
    arms = {arm: run_arm_in_child(arm, workdir, args.users, args.interval, not args.no_prepuller)
            for arm in ARMS}
    report: dict[str, Any] = {arm: summarize(arms[arm]) for arm in ARMS}
    il, base = report["image_locality"], report["baseline"]
    report["target"] = {
        "p95_s_max": TARGET_P95_S,
        "no_pull_wait_while_holder_could_take": il["image_pull_waits_while_holder_could_take"] == 0,
        "image_locality_p95_within": il["p95_s"] <= TARGET_P95_S,
        "baseline_p95_within": base["p95_s"] <= TARGET_P95_S,
    }
    report["target"]["met"] = (report["target"]["no_pull_wait_while_holder_could_take"]
                               and report["target"]["image_locality_p95_within"]
                               and not report["target"]["baseline_p95_within"])
    report["scenario"] = {"file": str(SCENARIO.relative_to(REPO)), "users": args.users,
                          "interval_s": args.interval,
                          "continuous_image_puller": not args.no_prepuller, "workdir": str(workdir)}
    report["per_user"] = {arm: [
        {"user": s["user"], "offset_s": s.get("offset_s"), "total_s": (s.get("phases") or {}).get("total"),
         "start_returned_s": s.get("start_returned_s"), "node": s.get("node"), "pull_wait_s": s.get("pull_wait_s"), "affinity": s.get("affinity"),
         "holders_that_fit_at_request": len(s["at_request"]["holders_that_fit"]) if s.get("at_request") else None,
         **({"error": s["error"]} if "error" in s else {})}
        for s in arms[arm]["spawns"]] for arm in ARMS}
    report["nodes_at_end"] = {arm: arms[arm]["nodes_at_end"] for arm in ARMS}
    if args.details:
        report["details"] = arms
    report["machine"] = machine()
    report["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
