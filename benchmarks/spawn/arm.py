"""One arm of benchmarks/spawn_latency.py, in a child process: real spawners started one
by one on the simulated cluster, and each spawn's timings read back."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import re
import sys
import time
from typing import Any

from benchmarks.spawn.scene import IMAGE, NAMESPACE, PULL_WAIT_S


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
    for sp, r in zip(spawners, results, strict=True):
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
