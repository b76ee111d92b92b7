"""The demo's Prometheus: Debian's (/usr/bin/prometheus) scraping the simulated dcgm-exporter
and a kube-state-metrics stand-in, so that the admin page's usage report has history from the
first minutes (without it the report showed nothing before the service's own record), and the
reclaim service reads GPU utilization from it, as on a z2jh hub (helm-values/gpu-reclaim.yaml).

The stand-in writes the series of the pods in the hub's namespace that kube-state-metrics 2
writes and the report reads (report/promql.py): their labels (the hub's username and server
name, allow-listed as the docs tell admins), the profile annotation, the phase, the GPU
requests and whether the scheduler found no node; read from the cluster's API with kubectl at
each scrape. Everything listens on the loopback of the machine (or of the test worker's network
namespace) and is stopped by its PID; the release's pods reach Prometheus there through the
address `run --reach` offers it at inside the run's network namespace (`as_service`)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import yaml

from ..launch import Child, free_port, spawn
from .release import host_service

PROMETHEUS = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL = "5s"  # the demo's cycles come every 15 s
NAMESPACE = "jhub"
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# the pod labels kube-state-metrics 2 is told to keep (--metric-labels-allowlist), and the annotation
LABELS = ("hub.jupyter.org/username", "hub.jupyter.org/servername", "component")
ANNOTATIONS = ("jupyterhub-gpu-reclaim/profile",)


def _name(prefix: str, key: str) -> str:
    return f"{prefix}_{re.sub(r'[^a-zA-Z0-9_]', '_', key)}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(metric: str, labels: dict[str, str], value: float) -> str:
    """One sample; empty label values left out, as Prometheus stores none."""
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items() if v != "")
    return f"{metric}{{{text}}} {value:g}\n"


def ksm_text(pods: list[dict[str, Any]]) -> str:
    """kube-state-metrics' exposition of `pods` (the API's JSON), the series the report reads."""
    out = []
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        base = {"namespace": meta.get("namespace", ""), "pod": meta.get("name", ""), "uid": meta.get("uid", "")}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        out.append(_line("kube_pod_labels", base | {_name("label", k): labels.get(k, "") for k in LABELS}, 1))
        found = {_name("annotation", k): annotations[k] for k in ANNOTATIONS if annotations.get(k)}
        if found:
            out.append(_line("kube_pod_annotations", base | found, 1))
        phase = status.get("phase", "Unknown")
        out += [_line("kube_pod_status_phase", base | {"phase": p}, float(p == phase)) for p in PHASES]
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or []):
            out.append(_line("kube_pod_status_unschedulable", base, 1))
        for c in spec.get("containers") or []:
            resources = c.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for resource, value in asked.items():
                if resource.startswith("nvidia.com/"):
                    out.append(_line("kube_pod_container_resource_requests", base | {
                        "container": c.get("name", ""), "node": spec.get("nodeName", ""),
                        "resource": re.sub(r"[^a-zA-Z0-9_]", "_", resource), "unit": "integer"}, float(value)))
    return "".join(out)


def _serve(port: int, text: Callable[[], str]) -> ThreadingHTTPServer:
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                body, code = text().encode(), 200
            except Exception as e:  # the scrape fails, Prometheus marks the target down
                body, code = f"{type(e).__name__}: {e}\n".encode(), 500
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # one line a scrape is noise in the demo's output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Metrics)
    threading.Thread(target=server.serve_forever, name="demo-ksm", daemon=True).start()
    return server


@dataclass
class DemoPrometheus:
    url: str
    child: Child
    ksm: ThreadingHTTPServer

    def alive(self) -> bool:
        return self.child.alive()

    def stop(self) -> None:
        self.child.stop()
        self.ksm.shutdown()
        self.ksm.server_close()


def unavailable() -> str | None:
    """Why the demo runs without Prometheus, or None."""
    return None if PROMETHEUS.exists() else f"{PROMETHEUS} is not installed (apt-get install prometheus)"


#: where the release's service finds it: a Service without a selector in front of its port
SERVICE_NAMESPACE, SERVICE, SERVICE_PORT = "monitoring", "prometheus-server", 9090
RELEASE_OPTIONS = {"prometheus-url": f"http://{SERVICE}.{SERVICE_NAMESPACE}.svc:{SERVICE_PORT}",
                   "prometheus-pod-label": "auto"}


def as_service(address: str) -> list[dict]:
    """Prometheus as the Service `monitoring/prometheus-server:9090` (as the z2jh values name
    it: RELEASE_OPTIONS), for the release's service in the hub's pod, its EndpointSlice leading
    to `address` (`HOST:PORT` where the pods reach Prometheus's port: release.reached, as the
    real API server refuses loopback in EndpointSlices and the run's network namespace has its
    own); as release.dcgm_exporter does for the simulated exporter."""
    host, port = address.rsplit(":", 1)
    return host_service(SERVICE_NAMESPACE, SERVICE, "web", SERVICE_PORT, host, int(port))


def start(workdir: Path, dcgm_url: str, kubeconfig: str, kubectl: str, port: int | None = None,
          timeout: float = 30) -> DemoPrometheus:
    """Prometheus on 127.0.0.1:`port` (a free one by default) in `workdir`/prometheus (its
    TSDB kept across the demo's runs, so the report keeps its history), scraping `dcgm_url`
    and the kube-state-metrics stand-in."""
    def pods() -> str:
        done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "-n", NAMESPACE, "get", "pods", "-o", "json"],
                              capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        if done.returncode:
            raise RuntimeError(done.stderr.strip()[-500:])
        return ksm_text(json.loads(done.stdout)["items"])

    ksm = _serve(free_port(), pods)
    home = workdir / "prometheus"
    home.mkdir(parents=True, exist_ok=True)
    dcgm = urllib.parse.urlsplit(dcgm_url)
    config = {"global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
              "scrape_configs": [
                  {"job_name": "dcgm-exporter", "metrics_path": dcgm.path or "/metrics",
                   "static_configs": [{"targets": [dcgm.netloc]}]},
                  {"job_name": "kube-state-metrics", "honor_labels": True,
                   "static_configs": [{"targets": [f"127.0.0.1:{ksm.server_address[1]}"]}]}]}
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    child = spawn("prometheus", [str(PROMETHEUS), f"--config.file={home / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={home / 'data'}", "--storage.tsdb.retention.time=31d",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                   workdir / "prometheus.log", {}, home)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                if r.status == 200:
                    return DemoPrometheus(url, child, ksm)
        except (urllib.error.URLError, OSError):
            pass
        if not child.alive() or time.monotonic() > deadline:
            child.stop()
            ksm.shutdown()
            raise RuntimeError(f"Prometheus did not start:\n{child.log_tail()}")
        time.sleep(0.2)
