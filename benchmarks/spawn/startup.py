"""The notebook server's start-up after its pod is Ready, measured on the real stack for
benchmarks/spawn_latency.py (stub mode has none)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gpu_reclaim_sim.launch import start_sim
from gpu_reclaim_sim.paths import DEFAULT_SCENARIO

from benchmarks.spawn.scene import NAMESPACE, SIM_START_S
from benchmarks.support.paths import REPO

STARTUP_SCENARIO = DEFAULT_SCENARIO
STARTUP_HUB_CONFIG = REPO / "tests" / "jupyterhub_config.py"
STARTUP_USERS = ("alice", "bob", "carol")  # the demo's allowed users


async def _measure_startup(sim: Any, hub: Any, token: str, samples: int) -> list[dict[str, Any]]:
    """Start `samples` servers one after another (cpu profile, image already on the node),
    each: request → pod Ready (seen by polling the pod every 0.1 s, and the Ready condition)
    → the hub reports the server ready (polled every 0.1 s); then stop it."""
    import aiohttp
    from kubernetes_asyncio import client as kclient, config as kconfig

    from jupyterhub_gpu_reclaim.spawner import timings as T

    await kconfig.load_kube_config(config_file=sim.info["kubeconfig"])
    out: list[dict[str, Any]] = []
    async with kclient.ApiClient() as k8s, aiohttp.ClientSession(
            headers={"Authorization": f"token {token}"}) as http:
        core = kclient.CoreV1Api(k8s)
        api = hub.info["url"] + "/hub/api"

        async def call(method: str, path: str, body: Any = None) -> Any:
            async with http.request(method, api + path, json=body) as r:
                text = await r.text()
                if r.status >= 400 and not (method == "POST" and r.status == 409):
                    raise RuntimeError(f"{method} {path}: {r.status} {text[:500]}")
                return json.loads(text) if text else None

        async def read_pod(name: str) -> dict | None:
            r = await core.read_namespaced_pod(name, NAMESPACE, _preload_content=False)
            body = json.loads(await r.read())
            return body if r.status == 200 and body.get("kind") == "Pod" else None

        for i in range(samples):
            name = STARTUP_USERS[i % len(STARTUP_USERS)]
            pod_name = f"jupyter-{name}"
            await call("POST", f"/users/{name}")
            requested = dt.datetime.now(dt.timezone.utc)
            t0 = time.monotonic()
            await call("POST", f"/users/{name}/server", {"profile": "cpu"})
            pod_ready_wall = hub_ready_wall = None
            while time.monotonic() - t0 < 180 and hub_ready_wall is None:
                if pod_ready_wall is None:
                    pod = await read_pod(pod_name)
                    if pod and any(c.get("type") == "Ready" and c.get("status") == "True"
                                   for c in (pod.get("status") or {}).get("conditions") or []):
                        pod_ready_wall = time.monotonic()
                server = (await call("GET", f"/users/{name}"))["servers"].get("")
                if server and server.get("ready"):
                    hub_ready_wall = time.monotonic()
                await asyncio.sleep(0.1)
            if hub_ready_wall is None:
                raise RuntimeError(f"{name}'s server not ready after 180 s")
            hub_ready_at = dt.datetime.now(dt.timezone.utc)
            pod = await read_pod(pod_name)
            assert pod is not None, f"{pod_name} vanished"
            events = json.loads(await (await core.list_namespaced_event(
                NAMESPACE, _preload_content=False)).read())["items"]
            t = T.extract(pod, events, requested)
            pod_total = t.phases().get("total")
            if pod_ready_wall is None:  # the hub answered before our poll saw the pod Ready
                pod_ready_wall = hub_ready_wall
            out.append({
                "user": name, "node": pod["spec"].get("nodeName"), "image_pulled": t.image_pulled,
                "requested_to_pod_ready_s": round(pod_ready_wall - t0, 2),
                "requested_to_hub_ready_s": round(hub_ready_wall - t0, 2),
                # the start-up: pod Ready (seen by polling) → the hub reports the server ready
                "server_startup_s": round(hub_ready_wall - pod_ready_wall, 2),
                # the same from the Ready condition's lastTransitionTime (whole seconds, so
                # this reads up to 1 s high)
                "pod_total_s": pod_total,
                "server_startup_by_condition_s": round(
                    (hub_ready_at - t.ready).total_seconds() - (time.monotonic() - hub_ready_wall), 2)
                if t.ready else None,
            })
            print(f"start-up sample {i + 1}/{samples}: {out[-1]}", file=sys.stderr)
            await call("DELETE", f"/users/{name}/server")
            for _ in range(600):
                if (await call("GET", f"/users/{name}"))["servers"].get("") is None:
                    break
                await asyncio.sleep(0.2)
            # wait until the pod is gone too, so the next sample starts on a quiet node
            for _ in range(300):
                if await read_pod(pod_name) is None:
                    break
                await asyncio.sleep(0.2)
    return out


def measure_server_startup(workdir: Path, samples: int) -> dict[str, Any]:
    """The notebook server's start-up after its pod is Ready, on the project's real stack
    (from inside a run's network namespace, where the pods' addresses are):
    the simulated cluster in process mode (`gpu_reclaim_sim/scenarios/cluster.yaml`, which runs
    `jupyterhub-singleuser` for real) and a real JupyterHub on it (the tests' configuration:
    the demo's plus an API token). Every process started here is stopped by its PID."""
    import secrets

    from gpu_reclaim_sim.launch import free_port, start_hub
    from gpu_reclaim_sim.network import namespace

    if not namespace.inside():  # else the hub's requests to the pods' addresses leave the machine
        raise RuntimeError("the hub must reach the pods at their addresses: run the benchmark as root, in a "
                           "network namespace of a run's kind (python -m gpu_reclaim_sim.network.namespace ...)")
    base = workdir / "startup"
    sim = start_sim(base, STARTUP_SCENARIO, SIM_START_S)
    hub = None
    try:
        token = secrets.token_hex(16)
        hub = start_hub(base / "hub", STARTUP_HUB_CONFIG, sim.info["kubeconfig"], port=free_port(),
                        env={"GPU_RECLAIM_TEST_TOKEN": token, "GPU_RECLAIM_REPO": str(REPO),
                             "GPU_RECLAIM_DEMO_PASSWORD": secrets.token_hex(8)})
        runs = asyncio.run(_measure_startup(sim, hub, token, samples))
    finally:
        if hub is not None:
            hub.stop(grace=60)
        sim.stop()
    values = sorted(r["server_startup_s"] for r in runs)
    return {"server_startup_s": round(statistics.median(values), 1),
            "min_s": values[0], "max_s": values[-1], "samples": len(values),
            "method": "process-mode cluster + JupyterHub, cpu profile, image on the node: "
                      "pod Ready → hub reports the server ready, each polled every 0.1 s",
            "runs": runs}
