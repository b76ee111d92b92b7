"""The real JupyterHub with the unmodified KubeSpawner on the simulated cluster:
GPU spawns, the GPU queue, home directories, and pods deleted behind the hub's back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.integration


def kubectl(sim, *args: str) -> str:
    exe = __import__("pathlib").Path(sys.executable).with_name("kubectl")
    return subprocess.run([str(exe), "--kubeconfig", sim.info["kubeconfig"], *args],
                          check=True, capture_output=True, text=True, timeout=30).stdout


def pod(sim, name: str) -> dict | None:
    out = json.loads(kubectl(sim, "get", "pods", "-n", "jhub", "-o", "json"))
    return next((p for p in out["items"] if p["metadata"]["name"] == name), None)


async def test_gpu_spawn_shows_progress_and_runs_code(api, sim):
    await api.start("alice", "gpu-1")
    events = await api.progress("alice")
    messages = "\n".join(e.get("message", "") for e in events)
    for expected in ("Successfully assigned jhub/jupyter-alice to gpu-",
                     'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02"',
                     "Successfully pulled image", "Started container notebook"):
        assert expected in messages, messages
    assert events[-1].get("ready") is True
    server = await api.wait_ready("alice")
    assert server["ready"]
    out = await api.run_code("alice", "import os; print(21 * 2, len(os.environ['NVIDIA_VISIBLE_DEVICES'].split(',')))")
    assert out.split() == ["42", "1"]
    # the GPU the pod got is the one dcgm-exporter reports for it
    p = pod(sim, "jupyter-alice")
    assert p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    metrics = urllib.request.urlopen(sim.info["metrics"], timeout=5).read().decode()
    assert 'pod="jupyter-alice"' in metrics and "DCGM_FI_DEV_GPU_UTIL" in metrics


async def test_busy_gpu_shows_in_dcgm_metrics(api, sim):
    await api.start("dave", "gpu-1")
    await api.wait_ready("dave")
    await api.run_code("dave", "from gpu_reclaim_sim.gpu import use_gpu\n"
                               "print(use_gpu(percent=87, seconds=30, block=False))")
    deadline = time.monotonic() + 10
    line = ""
    while time.monotonic() < deadline:
        metrics = urllib.request.urlopen(sim.info["metrics"], timeout=5).read().decode()
        line = next((ln for ln in metrics.splitlines()
                     if ln.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'pod="jupyter-dave"' in ln), "")
        if line.endswith(" 87.0"):
            break
        await asyncio.sleep(0.5)
    assert line.endswith(" 87.0"), line


async def test_second_gpu_user_waits_until_first_stops(api, sim):
    # four GPUs in the cluster: two users take two each, a third waits in the queue
    await api.start("alice", "gpu-2")
    await api.wait_ready("alice")
    await api.start("bob", "gpu-2")
    await api.wait_ready("bob")
    await api.start("carol", "gpu-1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        p = pod(sim, "jupyter-carol")
        cond = {c["type"]: c for c in (p or {}).get("status", {}).get("conditions", [])}
        if "Insufficient nvidia.com/gpu" in cond.get("PodScheduled", {}).get("message", ""):
            break
        await asyncio.sleep(0.5)
    assert p["status"]["phase"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in cond["PodScheduled"]["message"]
    # kube-scheduler's Events (events.k8s.io) count its retries as a series of its first one for
    # the pod, with that one's words: the pod's condition, which the spawner reads, says what it
    # waits for now
    events = json.loads(kubectl(sim, "get", "events", "-n", "jhub", "--field-selector",
                                "involvedObject.name=jupyter-carol,reason=FailedScheduling", "-o", "json"))["items"]
    assert events and {e["reportingComponent"] for e in events} == {"default-scheduler"}
    server = await api.server("carol")
    assert server["pending"] == "spawn" and not server["ready"]
    # stopping a server through the hub's REST API frees its GPUs for the queue
    await api.stop("alice")
    server = await api.wait_ready("carol", timeout=60)
    assert server["ready"]


async def test_home_survives_restart_tmp_does_not(api, sim):
    await api.start("erin")
    await api.wait_ready("erin")
    await api.run_code("erin", "import os\n"
                       "open(os.path.expanduser('~/notes.txt'), 'w').write('kept')\n"
                       "open('/tmp/scratch.txt', 'w').write('lost')\n")
    await api.stop("erin")
    assert pod(sim, "jupyter-erin") is None
    await api.start("erin")
    await api.wait_ready("erin")
    out = await api.run_code("erin", "import os\n"
                             "print(open(os.path.expanduser('~/notes.txt')).read())\n"
                             "print(os.path.exists('/tmp/scratch.txt'))\n"
                             "print(os.path.expanduser('~'))\n")
    assert out.split() == ["kept", "False", "/home/jovyan"]


async def test_pod_deleted_behind_hubs_back_is_not_a_stop(api, sim):
    await api.start("frank")
    await api.wait_ready("frank")
    kubectl(sim, "delete", "pod", "-n", "jhub", "jupyter-frank", "--wait=true")
    # the hub still believes the server runs: deleting a pod is not a stop
    server = await api.server("frank")
    assert server is not None and server["ready"]
    # ... until it polls the spawner (Spawner.poll_interval, 10 s in the tests' hub)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and await api.server("frank") is not None:
        await asyncio.sleep(1)
    assert await api.server("frank") is None
