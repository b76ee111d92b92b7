"""`make demo` runs `jupyterhub-gpu-reclaim-sim demo`: the whole product on the simulated
cluster on the real control plane — the Zero to JupyterHub release with GPUReclaimSpawner and the reclaim service
with its pages and shrunk timings, as the release tests install it — and stops cleanly on
SIGTERM. Without the chart beside the clone it says so and runs a JupyterHub of its own."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from gpu_reclaim_sim.launch import free_port
from gpu_reclaim_sim.network import namespace
from gpu_reclaim_sim.z2jh import release as z2jh

from ..support.sim_cluster import KUBECTL

pytestmark = pytest.mark.integration

PASSWORD = "demo-password"
T = TypeVar("T")


def outside(call: Callable[[], T]) -> T:
    """`call()` in the network namespace the test worker was started in (the machine's, where a
    person runs `make demo`), on a thread of its own: a network namespace is per thread."""
    origin = namespace.origin()
    assert origin is not None, "the test worker runs in a network namespace of its own"
    result: list[T] = []

    def run() -> None:
        namespace.join(origin)
        result.append(call())
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert result, "the call outside failed (its error is above)"
    return result[0]


def get(url: str, token: str | None = None, *, from_outside: bool = False) -> tuple[int, str]:
    if from_outside:
        return outside(lambda: get(url, token))
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


class Demo:
    """`jupyterhub-gpu-reclaim-sim demo ARGS` with its output in `out`."""

    def __init__(self, tmp_path: Path, *args: str, from_outside: bool = False) -> None:
        """With `from_outside`, started in the machine's network namespace, as a person starts it."""
        self.out = tmp_path / "demo.out"
        self.data = tmp_path / "demo"
        self.from_outside = from_outside
        cmd = [sys.executable, "-m", "gpu_reclaim_sim", "demo", "--data-dir", str(self.data),
               "--password", PASSWORD, *args]
        origin = namespace.origin()
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=(lambda: namespace.join(origin)) if from_outside and origin else None)

    def text(self) -> str:
        return self.out.read_text()

    def running(self, timeout: float = 240) -> tuple[str, str]:
        """The hub's URL the demo printed, and the service's metrics after its first cycle
        (which may come before the demo has printed its story)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.text()
            if m := re.search(r"Log in at (http://\S+)/hub/login", self.text()):
                status, metrics = get(f"{m.group(1)}/services/gpu-reclaim/metrics", from_outside=self.from_outside)
                if status == 200 and 'jupyterhub_gpu_reclaim_cycles_total{result="ok"}' in metrics:
                    return m.group(1), metrics
            time.sleep(1)
        raise AssertionError(f"the demo or its service did not come up:\n{self.text()[-3000:]}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def test_demo_installs_the_z2jh_release(tmp_path):
    if reason := z2jh.unavailable():
        pytest.skip(reason)
    port = free_port()  # where the release's proxy-public is published (the real plane's)
    demo = Demo(tmp_path, "--port", str(port))
    try:
        url, metrics = demo.running()
        assert url == f"http://127.0.0.1:{port}"
        text = demo.text()
        assert "Installing the release in namespace jhub" in text and PASSWORD in text
        assert f"{url}/services/gpu-reclaim/admin" in text and "'1 × GPU'" in text
        assert "jupyterhub_gpu_reclaim_dry_run 0.0" in metrics
        # the hub's login page, and the service's pages asking for a login, through proxy-public
        status, page = get(f"{url}/hub/login")
        assert status == 200 and 'name="password"' in page
        assert get(f"{url}/services/gpu-reclaim/")[0] == 200  # the hub's login page, after the OAuth redirects
        kubeconfig = json.loads((demo.data / "sim.json").read_text())["kubeconfig"]
        hub_log = z2jh.Release(kubeconfig, z2jh.NAMESPACE, url).hub_log()
        assert "Loading extra config: gpu-reclaim" in hub_log  # the chart's jupyterhub_config.py
        assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in hub_log
        assert "never_used_warn_after = 120.0" in hub_log  # gpu_reclaim_sim/demo_config/values.yaml
        # the service reads the demo's Prometheus (demo_prometheus) by its Service, as on a hub
        assert "Prometheus (the usage report's history): http://127.0.0.1:" in text
        assert "http://prometheus-server.monitoring.svc:9090" in hub_log, hub_log[-3000:]
    finally:
        code = demo.stop()
    assert code == 0, demo.text()[-3000:]
    assert "Stopping" in demo.text()


def test_demo_without_the_chart_says_so_and_runs_its_own_hub(tmp_path):
    """Started from the machine's network namespace, as a person starts it: its hub runs in the
    cluster's own namespace with the pods (a pod's address is never sent out by the machine's
    default route), and the browser and kubectl come in through ports of the machine's loopback."""
    port = outside(free_port)
    demo = Demo(tmp_path, "--chart", str(tmp_path / "no-chart"), "--port", str(port), from_outside=True)

    def get(url: str, token: str | None = None) -> tuple[int, str]:  # as the machine's browser
        return globals()["get"](url, token, from_outside=True)

    try:
        url, metrics = demo.running()
        assert url == f"http://127.0.0.1:{port}"
        for _ in range(60):  # the story's end, which may come after the service's first cycle
            if "Press Ctrl-C to stop." in (text := demo.text()):
                break
            time.sleep(1)
        # its own network namespace where it starts outside one (in CI the worker's origin is
        # the test run's namespace already: then the demo stays there, and needs no doorway)
        kubeconfig = re.search(r"The cluster with kubectl:  KUBECONFIG=(\S+) ", text).group(1)
        doorway = kubeconfig.endswith("kubeconfig-outside")
        nodes = outside(lambda: subprocess.run([str(KUBECTL), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name"],
                                               capture_output=True, text=True, timeout=60))
        assert nodes.stdout.split() == ["node/cpu-1", "node/gpu-1", "node/gpu-2"], nodes.stderr
        assert (f"demo: not installing the Zero to JupyterHub release: the z2jh chart is not at "
                f"{tmp_path / 'no-chart'}") in text
        assert "The demo is running" in text and PASSWORD in text
        assert f"{url}/services/gpu-reclaim/admin" in text
        assert "jupyterhub_gpu_reclaim_dry_run 0.0" in metrics
        # the user pages ask for a login through the hub
        status, _ = get(f"{url}/services/gpu-reclaim/")
        assert status == 200  # the hub's login page, after the OAuth redirects
        hub_log = (demo.data / "jupyterhub.log").read_text()
        assert "Starting managed service gpu-reclaim" in hub_log
        assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in hub_log
        assert json.loads(get(f"{url}/hub/api/")[1])["version"]
        # the spawner's own token (link_to_service, kept in the data dir) reaches the service, and no more
        token = (demo.data / "gpu_reclaim_spawner_token").read_text()
        status, body = get(f"{url}/services/gpu-reclaim/api/reclaims?user=alice", token)
        assert status == 200 and json.loads(body) == {"reclaims": []}, (status, body)
        assert get(f"{url}/hub/api/users", token)[0] == 403
        assert token not in hub_log
        # Debian's Prometheus scrapes the simulated dcgm-exporter and the kube-state-metrics
        # stand-in, and the service reads it (the GPU readings, the usage report's history)
        prometheus = re.search(r"Prometheus \(the usage report's history\): (http://\S+)", demo.text()).group(1)
        for job in ("dcgm-exporter", "kube-state-metrics"):
            for _ in range(60):  # its first scrape of each comes within a scrape interval (5 s)
                status, body = get(f"{prometheus}/api/v1/query?query=up%7Bjob%3D%22{job}%22%7D")
                if status == 200 and [r["value"][1] for r in json.loads(body)["data"]["result"]] == ["1"]:
                    break
                time.sleep(1)
            else:
                raise AssertionError((job, status, body))
        status, body = get(f"{prometheus}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL")
        assert status == 200 and json.loads(body)["data"]["result"], body
        # and the exporter itself at the address the story gives, as this machine's browser reaches it
        dcgm = re.search(r"dcgm-exporter's at (http://\S+?)\.\n", text).group(1)
        status, body = get(dcgm)
        assert status == 200 and "DCGM_FI_DEV_GPU_UTIL" in body, (dcgm, status)
        # the service's settings at its start: its Prometheus inside, at an address of its own
        assert re.search(r"prometheus_url = 'http://127\.0\.0\.1:\d+'", hub_log)
        assert (prometheus in hub_log) is not doorway
    finally:
        code = demo.stop()
    assert code == 0, demo.text()[-3000:]
    assert "Stopping" in demo.text()
