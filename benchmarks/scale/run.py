"""The phases of benchmarks/sim_scale.py against a started simulator: create, get, list,
delete, and the lags the reflector saw."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from typing import Any

from gpu_reclaim_sim.launch import Child

from benchmarks.scale.floor import raw_list, transfer_floor
from benchmarks.scale.pods import pod_manifests
from benchmarks.scale.reflector import ReflectorHandle
from benchmarks.scale.scene import KUBESPAWNER_DELETE_GRACE, LABEL_SELECTOR, NAMESPACE, SENT_AT, TARGET_P99_MS
from benchmarks.scale.timing import Recorder, Sampler, paced, timed
from benchmarks.support.process import minor_faults, proc_cpu_seconds, proc_status


async def run_benchmark(args: argparse.Namespace, sim: Child) -> dict[str, Any]:
    from kubespawner.clients import load_config, shared_client

    pid = sim.proc.pid
    res: dict[str, Any] = {"pods": args.pods, "concurrency": args.concurrency, "rate": args.rate,
                           "gets": args.gets, "lists": args.lists}
    res["rss_after_start"] = proc_status(pid)
    res["cpu_after_start"] = proc_cpu_seconds(pid)
    sampler = Sampler(pid)
    sampler.start()

    from kubespawner.spawner import PodReflector

    traits = PodReflector.class_traits()
    res["reflector_settings"] = {k: traits[k].default_value
                                 for k in ("timeout_seconds", "restart_seconds", "request_timeout")}
    load_config()  # KubeSpawner's own client set-up, reading KUBECONFIG
    api = shared_client("CoreV1Api")
    manifests = await pod_manifests(args.pods)
    names = [m["metadata"]["name"] for m in manifests]
    keys = [f"{NAMESPACE}/{n}" for n in names]
    res["gpu_pods"] = sum(1 for m in manifests if "nvidia.com/gpu" in
                          (m["spec"]["containers"][0]["resources"].get("limits") or {}))
    res["gpus_requested"] = sum(int((m["spec"]["containers"][0]["resources"].get("limits") or {})
                                    .get("nvidia.com/gpu", 0)) for m in manifests)
    res["manifest_bytes"] = len(json.dumps(manifests[1]))

    reflector = ReflectorHandle(NAMESPACE, args.pods)
    if await reflector.wait_for("ready", 60) is None:
        raise RuntimeError("KubeSpawner's reflector did not finish its first list")
    rec = Recorder()
    sent_at: dict[str, float] = {}
    deleted_at: dict[str, float] = {}

    # --- create -------------------------------------------------------------------------
    async def create(i: int) -> None:
        body = manifests[i]
        sent = time.time()
        body["metadata"]["annotations"][SENT_AT] = f"{sent:.6f}"
        sent_at[keys[i]] = sent
        await timed(rec, "create", lambda: api.create_namespaced_pod(
            NAMESPACE, body, _preload_content=False))

    print(f"creating {args.pods} pods at {args.rate:g}/s, {args.concurrency} in flight ...", flush=True)
    cpu0 = proc_cpu_seconds(pid)
    t_create0 = time.time()
    res["create_seconds"] = await paced(args.pods, args.rate, args.concurrency, create)
    res["cpu_create"] = proc_cpu_seconds(pid) - cpu0
    t_all_running = await reflector.wait_for("running", args.settle_timeout)
    res["all_running_seconds"] = (t_all_running - t_create0) if t_all_running else None
    res["cpu_until_running"] = proc_cpu_seconds(pid) - cpu0
    res["rss_all_running"] = proc_status(pid)
    print(f"  created in {res['create_seconds']:.1f} s; all Running in the reflector after "
          f"{res['all_running_seconds'] if t_all_running else 'NEVER'} s", flush=True)

    # --- get ----------------------------------------------------------------------------
    rng = random.Random(2)
    picks = [rng.randrange(args.pods) for _ in range(args.gets)]

    async def get(i: int) -> None:
        await timed(rec, "get", lambda: api.read_namespaced_pod(names[picks[i]], NAMESPACE,
                                                               _preload_content=False))

    print(f"{args.gets} gets ...", flush=True)
    res["get_seconds"] = await paced(args.gets, args.get_rate, args.concurrency, get)

    # --- list ---------------------------------------------------------------------------
    # as KubeSpawner's client asks (aiohttp: `Accept-Encoding: gzip, deflate`), alternating
    # with lists that ask for no compression (as the official `kubernetes` client does)
    # The first lists are warm-up, not timed: the client's heap grows to hold a list's body.
    print(f"{args.lists} full lists, and {args.lists} asking for no compression "
          f"(after {args.warmup_lists} of each not timed) ...", flush=True)
    list_counts, list_bytes, wire = [], [], []
    res["list_faults"] = faults = []  # the client's minor page faults during each timed list
    last_list = b""
    for i in range(2 * (args.warmup_lists + args.lists)):
        plain = i % 2 == 1
        warm = i >= 2 * args.warmup_lists
        faults0 = minor_faults()
        body = await timed(rec if warm else Recorder(), "list_plain" if plain else "list",
                           lambda plain=plain: api.list_namespaced_pod(
                               NAMESPACE, label_selector=LABEL_SELECTOR, _preload_content=False,
                               _headers={"Accept-Encoding": "identity"} if plain else {}), wire=wire)
        if warm:
            faults.append(minor_faults() - faults0)
        if body is not None:
            list_bytes.append(len(body))
            last_list = body
        await asyncio.sleep(args.list_pause)
    if last_list:  # decoded once, after the timed lists: the floor's loop decodes none either
        list_counts.append(len(json.loads(last_list)["items"]))
    res["list_wire"] = sorted(set(wire))
    if last_list:
        res["list_floor"] = await transfer_floor(last_list, args.lists, args.list_pause,
                                                 warmup=args.warmup_lists)
        gzipped = await raw_list(sim, LABEL_SELECTOR)
        res["list_gzip_mb"] = len(gzipped) / 2**20
        res["list_floor_gzip"] = await transfer_floor(gzipped, args.lists, args.list_pause, "gzip",
                                                      warmup=args.warmup_lists)
    res["list_items"] = sorted(set(list_counts))
    res["list_mb"] = (sum(list_bytes) / len(list_bytes) / 2**20) if list_bytes else math.nan
    res["rss_after_lists"] = proc_status(pid)

    # events the cluster keeps for these pods (limit=1: the server counts the rest)
    body = await timed(Recorder(), "events", lambda: api.list_namespaced_event(
        NAMESPACE, limit=1, _preload_content=False))
    if body is not None:
        meta = json.loads(body)
        res["events_stored"] = len(meta["items"]) + int(meta["metadata"].get("remainingItemCount") or 0)

    # --- delete -------------------------------------------------------------------------
    async def delete(i: int) -> None:
        deleted_at[keys[i]] = time.time()
        await timed(rec, "delete", lambda: api.delete_namespaced_pod(
            names[i], NAMESPACE, body={"gracePeriodSeconds": KUBESPAWNER_DELETE_GRACE},
            grace_period_seconds=KUBESPAWNER_DELETE_GRACE, _preload_content=False))

    if not args.keep_pods:
        print(f"deleting {args.pods} pods (gracePeriodSeconds={KUBESPAWNER_DELETE_GRACE}, as KubeSpawner) ...",
              flush=True)
        reflector.send("await_gone")
        cpu1 = proc_cpu_seconds(pid)
        t_delete0 = time.time()
        res["delete_seconds"] = await paced(args.pods, args.rate, args.concurrency, delete)
        t_gone = await reflector.wait_for("gone", args.settle_timeout)
        res["all_gone_seconds"] = (t_gone - t_delete0) if t_gone else None
        res["cpu_delete"] = proc_cpu_seconds(pid) - cpu1
        await asyncio.sleep(1.0)
    res["rss_end"] = proc_status(pid)
    res["cpu_total"] = proc_cpu_seconds(pid)
    await sampler.stop()
    res["rss_samples_mb"] = [s for _, s in sampler.samples]
    data = await reflector.stop()

    # --- lags ---------------------------------------------------------------------------
    first_seen, running_at, gone_at = (data.get(k, {}) for k in ("first_seen", "running_at", "gone_at"))
    seen_via = data.get("seen_via", {})
    by_watch = [k for k in keys if k in first_seen and seen_via.get(k) == "watch"]
    res["lag_added"] = [first_seen[k] - sent_at[k] for k in by_watch]
    res["first_seen"], res["running_at"], res["gone_at"] = first_seen, running_at, gone_at
    windows = [(r["at"], r["at"] + r["seconds"]) for r in data.get("relists", []) if r["items"]]

    def during_relist(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    res["lag_added_quiet"] = [first_seen[k] - sent_at[k] for k in by_watch if not during_relist(sent_at[k])]
    res["slow"] = {}
    for op in ("create", "get", "delete"):
        starts = zip(rec.started.get(op, []), rec.latency.get(op, []), strict=True)
        slow = [(t, x) for t, x in starts if x * 1000 >= TARGET_P99_MS]
        # a request overlapping a reflector re-list: it started before the list ended and ended after it began
        overlap = sum(1 for t, x in slow if any(t <= b and t + x >= a for a, b in windows))
        res["slow"][op] = (len(slow), overlap)
    res["seen_via_list"] = sum(1 for k in keys if seen_via.get(k) == "list")
    res["never_seen"] = sum(1 for k in keys if k not in first_seen)
    res["lag_running"] = [running_at[k] - sent_at[k] for k in keys if k in running_at]
    res["lag_gone"] = [gone_at[k] - deleted_at[k] for k in keys if k in gone_at and k in deleted_at]
    res["relists"] = data.get("relists", [])
    res["reflector_events"] = data.get("events", {})
    res["latency"] = rec.latency
    res["request_started"] = rec.started
    res["sent_at"], res["deleted_at"] = sent_at, deleted_at
    res["reflector_cpu_seconds"] = data.get("cpu_seconds")
    res["client_cpu_seconds"] = time.process_time()
    res["errors"] = {op: (len(v), v[:3]) for op, v in rec.errors.items()}
    return res
