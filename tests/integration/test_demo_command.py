"""`make demo` runs `jupyterhub-gpu-reclaim demo`: the whole product on the simulated
cluster — JupyterHub with GPUReclaimSpawner, and the reclaim service with its pages and
shrunk timings — and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from jupyterhub_gpu_reclaim.launch import free_port

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


def test_demo_runs_the_spawner_and_the_service(tmp_path):
    port = free_port()
    out = tmp_path / "demo.out"
    cmd = [sys.executable, "-m", "jupyterhub_gpu_reclaim", "demo", "--port", str(port),
           "--data-dir", str(tmp_path / "demo"), "--password", "demo-password"]
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        metrics = ""
        while time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()
            status, metrics = get(f"{url}/services/gpu-reclaim/metrics")
            # the service may run its first cycle before the demo has printed its story
            if (status == 200 and 'jupyterhub_gpu_reclaim_cycles_total{result="ok"}' in metrics
                    and "Press Ctrl-C to stop." in out.read_text()):
                break
            time.sleep(1)
        else:
            raise AssertionError(f"the demo or its service did not come up:\n{out.read_text()[-3000:]}")
        text = out.read_text()
        assert "The demo is running" in text and "demo-password" in text
        assert f"{url}/services/gpu-reclaim/admin" in text
        assert "jupyterhub_gpu_reclaim_dry_run 0.0" in metrics
        # the user pages ask for a login through the hub
        status, _ = get(f"{url}/services/gpu-reclaim/")
        assert status == 200  # the hub's login page, after the OAuth redirects
        hub_log = (tmp_path / "demo" / "jupyterhub.log").read_text()
        assert "Starting managed service gpu-reclaim" in hub_log
        assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in hub_log
        config = json.loads(get(f"{url}/hub/api/")[1])
        assert config["version"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, out.read_text()[-3000:]
    assert "Stopping" in out.read_text()
