#!/usr/bin/env python
"""Benchmark: the GPU queue on the real control plane (issue 37) — what the real
kube-scheduler says to pods waiting for a GPU, what the spawner makes of it, and who gets a
GPU when one frees.

Run it as `.venv/bin/python benchmarks/gpu_queue.py` (as root, as the tests run: the
cluster gets a network namespace of its own). It starts `jupyterhub-gpu-reclaim-sim run
--plane real` (`launch.start_sim`) on a scenario of two GPU nodes of 2 GPUs (tainted
`nvidia.com/gpu`, as GPU pools are) and a CPU node, stub mode; fills the 4 GPUs with
holders, then creates `--waiting` pods asking for one GPU each, `--spacing` seconds apart
(KubeSpawner's pod shape: the GPU as a limit, the toleration). For each waiting pod it
records the scheduler's verdict (create → PodScheduled False/Unschedulable, polled every
0.1 s), its FailedScheduling message, and the spawner's line for it
(`spawner.messages.translate_event`: "Waiting for a free GPU (…, N requests ahead of you, …)").
Then it deletes one holder at a time (grace 0, `--gap` seconds apart) and records which
waiting pod the scheduler binds next and how long after the delete was sent (the hand-over),
and whether that pod is the one the spawner told "no requests ahead of you". Prints JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpu_reclaim_sim.launch import start_sim  # noqa: E402

from benchmarks.spawn.scene import SIM_START_S  # noqa: E402
from benchmarks.support.process import machine  # noqa: E402

NAMESPACE = "jhub"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SCENARIO = {
    "name": "gpu-queue", "namespaces": [NAMESPACE], "mode": "stub", "defaultImageSize": "10MB",
    "nodeGroups": [
        {"name": "gpu", "count": 2, "cpu": "16", "memory": "64Gi", "gpus": 2, "taints": [TAINT]},
        {"name": "cpu", "count": 1, "cpu": "8", "memory": "32Gi"},
    ],
}
GPUS = 4
POLL_S = 0.1


def gpu_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"component": "singleuser-server"}}, "spec": {
        "terminationGracePeriodSeconds": 0, "tolerations": [{**TAINT, "operator": "Equal"}],
        "containers": [{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}}]}}


def run(core: Any, raw: Any, waiting: int, spacing: float, gap: float) -> dict[str, Any]:
    from jupyterhub_gpu_reclaim.spawner import messages

    def pod(name: str) -> dict | None:
        found = core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={name}").items
        return raw(found[0]) if found else None

    def until(check: Any, what: str, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := check():
                return value
            time.sleep(POLL_S)
        raise RuntimeError(f"no {what} after {timeout} s")

    holders = [f"holder-{i}" for i in range(GPUS)]
    for name in holders:
        core.create_namespaced_pod(NAMESPACE, gpu_pod(name))
    for name in holders:
        until(lambda n=name: (pod(n) or {}).get("status", {}).get("phase") == "Running", f"{name} running")
    names = [f"waiting-{i}" for i in range(waiting)]
    verdict: dict[str, float] = {}
    for name in names:
        sent = time.monotonic()
        core.create_namespaced_pod(NAMESPACE, gpu_pod(name))
        until(lambda n=name: messages.gpu_wait(pod(n) or {}), f"{name} marked unschedulable")
        verdict[name] = round(time.monotonic() - sent, 2)
        time.sleep(max(0.0, sent + spacing - time.monotonic()))
    pods = [p for n in names if (p := pod(n))]
    events = [raw(e) for e in core.list_namespaced_event(NAMESPACE, field_selector="reason=FailedScheduling").items]
    now = dt.datetime.now(dt.timezone.utc)
    told = {}
    for p in pods:
        name = p["metadata"]["name"]
        mine = [e for e in events if e["involvedObject"]["name"] == name]
        told[name] = {"failed_scheduling": mine[-1]["message"] if mine else None,
                      "spawner_says": messages.translate_event(mine[-1], p, pods, now, lambda image: None)
                      if mine else None,
                      "ahead": messages.queue_position(p, pods)}
    handovers = []
    bound: set[str] = set()
    for holder in holders[:waiting]:
        front = [n for n in names if n not in bound and told[n]["ahead"] == len(bound)]
        sent = time.monotonic()
        core.delete_namespaced_pod(holder, NAMESPACE, grace_period_seconds=0)
        got = until(lambda: [n for n in names if n not in bound and (pod(n) or {}).get("spec", {}).get("nodeName")],
                    "a waiting pod bound")
        handovers.append({"deleted": holder, "bound": got, "after_s": round(time.monotonic() - sent, 2),
                          "told_no_one_ahead": front})
        bound.update(got)
        time.sleep(gap)
    return {"verdict_s": verdict, "told": told, "handovers": handovers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waiting", type=int, default=4, help="pods waiting for a GPU (default 4, at most 4)")
    ap.add_argument("--spacing", type=float, default=2.0, help="seconds between the waiting pods' creates")
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between the holders' deletes")
    ap.add_argument("--workdir", help="keep the cluster's logs here (default: a temporary directory)")
    args = ap.parse_args()
    if not 0 < args.waiting <= GPUS:
        ap.error(f"--waiting: 1 to {GPUS}")
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-queue-"))
    workdir.mkdir(parents=True, exist_ok=True)
    scenario = workdir / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    started = time.time()
    sim = start_sim(workdir / "cluster", scenario, SIM_START_S)
    try:
        api = k8s_config.new_client_from_config(sim.info["kubeconfig"])
        result = run(k8s.CoreV1Api(api), api.sanitize_for_serialization, args.waiting, args.spacing, args.gap)
    finally:
        sim.stop()
    after = [h["after_s"] for h in result["handovers"]]
    result["summary"] = {
        "verdict_median_s": round(statistics.median(result["verdict_s"].values()), 2),
        "handover_median_s": round(statistics.median(after), 2), "handover_max_s": max(after),
        "front_of_queue_got_it": sum(h["bound"] == h["told_no_one_ahead"] for h in result["handovers"]),
        "handovers": len(after)}
    result["settings"] = vars(args) | {"workdir": str(workdir)}
    result["machine"] = machine()
    result["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
