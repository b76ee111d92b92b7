"""The hub benchmarks/service_cycle.py fakes: its users with a ready server each (5,000 by
default), which of them have a GPU and which an idle one, and their pods as KubeSpawner makes
them."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

IDLE_EVERY = 10  # one GPU server in 10 has an idle GPU (its kernels get probed)
NAMESPACE = "jhub"
TOKEN = "bench-token"
# both tools cull servers without GPUs after the z2jh chart's --timeout (its cull.timeout, the
# backtest's Z2JH_CULL_TIMEOUT), not idle-culler's own 600 s: the scene's CPU servers are kept
CULL_TIMEOUT_S = 3600
MAX_PAGE = 200  # JupyterHub's api_page_max_limit
DEFAULT_PAGE = 50  # api_page_default_limit


@dataclass(frozen=True)
class Scene:
    """How many users (one ready server each), and the share of them with a GPU, spread
    evenly: with a share of 1/5 user i has one when i % 5 == 0."""

    servers: int = 5000
    gpu_share: Fraction = Fraction(1, 5)

    def gpu_rank(self, i: int) -> int:
        """How many users before user i have a GPU."""
        return math.ceil(i * self.gpu_share)

    def gpu(self, i: int) -> bool:
        return self.gpu_rank(i + 1) > self.gpu_rank(i)

    def idle(self, i: int) -> bool:
        """Whether user i's GPU is idle (every IDLE_EVERY-th GPU server, the first included)."""
        return self.gpu(i) and self.gpu_rank(i) % IDLE_EVERY == 0

    @property
    def gpu_servers(self) -> int:
        return self.gpu_rank(self.servers)

    @property
    def idle_servers(self) -> int:
        return math.ceil(self.gpu_servers / IDLE_EVERY)

    def args(self) -> list[str]:
        """The command-line options that give this scene (service_cycle.py's)."""
        return ["--servers", str(self.servers), "--gpu-share", str(self.gpu_share)]


def user_name(i: int) -> str:
    return f"user-{i:05d}"


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def pod_json(i: int, gpu: bool, server_port: int, created: str) -> dict[str, Any]:
    """A single-user pod as KubeSpawner makes it and the API serves it (the fields
    signals.pods.pod_info reads, plus the usual bulk)."""
    name = user_name(i)
    resources = {"limits": {"cpu": "4", "memory": "16Gi", **({"nvidia.com/gpu": "1"} if gpu else {})},
                 "requests": {"cpu": "1", "memory": "4Gi", **({"nvidia.com/gpu": "1"} if gpu else {})}}
    return {
        "metadata": {"name": f"jupyter-{name}", "namespace": NAMESPACE, "creationTimestamp": created,
                     "resourceVersion": str(1000 + i),
                     "labels": {"component": "singleuser-server", "app": "jupyterhub",
                                "hub.jupyter.org/username": name, "hub.jupyter.org/servername": ""},
                     "annotations": {"hub.jupyter.org/username": name, "hub.jupyter.org/servername": ""}},
        "spec": {"nodeName": f"{'gpu' if gpu else 'cpu'}-node-{i % 50}",
                 "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                                 "args": ["jupyterhub-singleuser"],
                                 "env": [{"name": k, "value": v} for k, v in _env(name).items()],
                                 "ports": [{"name": "notebook-port", "containerPort": server_port,
                                            "protocol": "TCP"}],
                                 "resources": resources,
                                 "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                                 "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
                                 "imagePullPolicy": "IfNotPresent"}],
                 "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"claim-{name}"}}],
                 "tolerations": [{"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user",
                                  "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "restartPolicy": "OnFailure", "schedulerName": "default-scheduler",
                 "serviceAccountName": "default", "automountServiceAccountToken": False},
        "status": {"phase": "Running", "podIP": "127.0.0.1",
                   "conditions": [{"type": "PodScheduled", "status": "True"},
                                  {"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "notebook", "ready": True, "restartCount": 0,
                                          "image": "quay.io/jupyter/base-notebook:latest",
                                          "imageID": "quay.io/jupyter/base-notebook@sha256:0",
                                          "started": True,
                                          "state": {"running": {"startedAt": created}}}]},
    }


def _env(name: str) -> dict[str, str]:
    return {"JUPYTERHUB_API_TOKEN": "0" * 32, "JPY_API_TOKEN": "0" * 32,
            "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-{name}",
            "JUPYTERHUB_API_URL": "http://hub:8081/hub/api", "JUPYTERHUB_ACTIVITY_URL":
            f"http://hub:8081/hub/api/users/{name}/activity", "JUPYTERHUB_BASE_URL": "/",
            "JUPYTERHUB_HOST": "", "JUPYTERHUB_OAUTH_CALLBACK_URL": f"/user/{name}/oauth_callback",
            "JUPYTERHUB_OAUTH_SCOPES": f'["access:servers!server={name}/"]',
            "JUPYTERHUB_SERVER_NAME": "", "JUPYTERHUB_SERVICE_PREFIX": f"/user/{name}/",
            "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/{name}/", "JUPYTERHUB_USER": name,
            "JUPYTER_IMAGE": "quay.io/jupyter/base-notebook", "MEM_GUARANTEE": "4294967296",
            "MEM_LIMIT": "17179869184", "CPU_GUARANTEE": "1.0", "CPU_LIMIT": "4.0"}
