"""The demo's Prometheus (gpu_reclaim_sim/z2jh/demo_prometheus.py): Debian's Prometheus
scraping the simulated dcgm-exporter and the kube-state-metrics stand-in holds what the usage
report reads, so the report shows a hub user's GPU from the demo's first minutes: the report
command on it finds alice's pod, her profile and her GPU held (issue 39)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from gpu_reclaim_sim.z2jh import demo_prometheus

from ..support.live import sim_fixture

pytestmark = pytest.mark.integration

sim = sim_fixture("module")
KUBECTL = str(Path(sys.executable).with_name("kubectl"))
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "jupyter-alice", "namespace": "jhub",
                    "labels": {"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "",
                               "component": "singleuser-server"},
                    "annotations": {"jupyterhub-gpu-reclaim/profile": "gpu-1"}},
       "spec": {"containers": [{"name": "notebook", "image": "registry.k8s.io/pause:3.10.2",
                                "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                 "effect": "NoSchedule"}]}}


def query(url: str, promql: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_the_report_reads_the_demo_prometheus(sim, tmp_path):
    kubeconfig = sim.info["kubeconfig"]
    prometheus = demo_prometheus.start(tmp_path, sim.info["metrics"], kubeconfig, KUBECTL)
    try:
        subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "apply", "-f", "-"], input=yaml.safe_dump(POD),
                       text=True, check=True, capture_output=True, timeout=30)
        until(lambda: query(prometheus.url, 'kube_pod_status_phase{pod="jupyter-alice",phase="Running"} == 1'),
              60, "alice's pod Running in kube-state-metrics' series")
        until(lambda: query(prometheus.url, 'DCGM_FI_DEV_GPU_UTIL{pod="jupyter-alice"}'), 60,
              "alice's GPU in dcgm-exporter's series")
        labels, = (r["metric"] for r in query(prometheus.url, 'kube_pod_labels{pod="jupyter-alice"}'))
        assert labels["label_hub_jupyter_org_username"] == "alice" and labels["job"] == "kube-state-metrics"

        def alices_rows() -> list[dict]:
            done = subprocess.run([str(Path(sys.executable).with_name("jupyterhub-gpu-reclaim")), "report",
                                   "--prometheus-url", prometheus.url, "--since", "10m", "--step", "10", "--json"],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            return [r for r in json.loads(done.stdout)["rows"] if r["user"] == "alice" and r["held"] > 0]

        rows = until(alices_rows, 120, "alice's GPU held in the report")
        assert {r["profile"] for r in rows} == {"gpu-1"}, rows
    finally:
        prometheus.stop()
    assert not prometheus.alive()
