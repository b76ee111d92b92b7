"""The simulator's API server on a stand-in cluster (no scheduler, no kubelets), served from
a thread of its own, with kubectl, plain HTTP and the Kubernetes Python client to call it,
and the fixtures that give a test module one of its own."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gpu_reclaim_sim import scenario
from gpu_reclaim_sim.apiserver.server import ApiServer
from gpu_reclaim_sim.cluster import Cluster
from gpu_reclaim_sim.events import EventRecorder
from gpu_reclaim_sim.resources import BY_KIND
from gpu_reclaim_sim.rbac.serviceaccounts import ServiceAccountController
from gpu_reclaim_sim.store import Store

from .sim_cluster import kubectl_with

TOKEN = "test-token-123"
POD, NODE, NS = BY_KIND["Pod"], BY_KIND["Node"], BY_KIND["Namespace"]


class StandInCluster:
    """What ApiServer needs from sim.cluster.Cluster, without scheduler or kubelets."""

    def __init__(self, data_dir: Path) -> None:
        self.store = Store(history_limit=1000)
        self.events = EventRecorder(self.store)
        self.scenario = scenario.from_dict({
            "nodeGroups": [{"name": "cpu", "count": 1}],
            "apiserver": {"bookmarkInterval": "0.3s"},
        })
        self.token = TOKEN
        self.data_dir = data_dir
        self.apiserver: ApiServer | None = None  # set once made (Sim)

    create = Cluster.create  # the one create path (admission, the RBAC escalation check); needs `apiserver`

    def pod_log_path(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
        return self.data_dir / "logs" / namespace / pod / f"{container}{'.previous' if previous else ''}.log"


class Sim:
    """The stand-in cluster and its API server, served from a thread of their own."""

    def __init__(self, tmp: Path, tls: bool = False) -> None:
        self.cluster = StandInCluster(tmp / "data")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.cluster.apiserver = ApiServer(self.cluster, tls=tls)
        ServiceAccountController(self.cluster.store, self.cluster.create, self.server.ca_pem)
        self.call(self._setup)
        self.url = self.server.url
        self.kubeconfig = tmp / ("kubeconfig-tls" if tls else "kubeconfig")
        cluster_entry = self.server.kubeconfig_cluster()
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sim",
            "clusters": [{"name": "sim", "cluster": cluster_entry}],
            "users": [{"name": "sim", "user": {"token": TOKEN}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim", "namespace": "jhub"}}],
        }))

    async def _setup(self) -> None:
        for ns in ("default", "jhub"):
            self.cluster.create(NS, {"metadata": {"name": ns}})
        self.cluster.store.create(NODE, {
            "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.37.0", "kubeProxyVersion": "", "architecture": "amd64",
                                    "operatingSystem": "linux", "osImage": "Simulated", "kernelVersion": "6.1",
                                    "containerRuntimeVersion": "sim://1", "bootID": "b", "machineID": "m",
                                    "systemUUID": "u"},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        })
        await self.server.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn` (sync or a coroutine function) on the server's loop and return its result."""
        async def run() -> Any:
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result

        fut: Future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return fut.result(timeout=10)

    def close(self) -> None:
        self.call(self.server.stop)
        self.call(self.cluster.store.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    # --- clients -------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return kubectl_with(self.kubeconfig, *args, stdin=stdin, check=check)

    def http(self, method: str, path: str, body: Any = None, *, token: str | None = TOKEN,
             content_type: str = "application/json", raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._ssl()) as resp:
                text = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            text, status = e.read(), e.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text.decode()

    def _ssl(self) -> Any:
        if not self.server.tls:
            return None
        import ssl
        return ssl.create_default_context(cadata=self.server.ca_pem.decode())

    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(k8s_config.new_client_from_config(str(self.kubeconfig)))


def pod_manifest(name: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {"app": "demo"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "notebook", "image": "jupyter/base:2024"}], **spec}}


def make_namespace(sim: Sim, name: str) -> None:
    sim.call(sim.cluster.create, NS, {"metadata": {"name": name}})


def apiserver_fixtures(name: str):
    """A module's `sim` and `core` fixtures (`sim, core = apiserver_fixtures(NAME)`): the API
    server on a stand-in cluster of its own, closed after the module, and the official
    client's core API on it."""

    @pytest.fixture(scope="module")
    def sim(tmp_path_factory: pytest.TempPathFactory):
        s = Sim(tmp_path_factory.mktemp(name))
        yield s
        s.close()

    @pytest.fixture
    def core(sim: Sim) -> k8s.CoreV1Api:
        return sim.core()

    return sim, core
