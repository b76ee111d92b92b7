"""What the signals read, for their tests: a loopback HTTP server to serve it (Server),
dcgm-exporter's series, Prometheus' query answers (vector) and Kubernetes' pods (k8s_pod)."""

from __future__ import annotations

from aiohttp import web


class Server:
    """An aiohttp app on a free loopback port; `routes` maps path -> handler."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.requests: list[web.Request] = []
        self.url = ""

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


LABELS = 'gpu="{gpu}",UUID="GPU-{uuid}",device="nvidia{gpu}",modelName="NVIDIA A100",Hostname="{host}"'


def series(metric, gpu, value, pod="", ns="", host="gpu-1", uuid=None, exported=False, extra=""):
    base = LABELS.format(gpu=gpu, uuid=uuid or f"{host}-{gpu}", host=host)
    if exported:
        who = f'pod="dcgm-exporter-abc",namespace="gpu-operator",exported_pod="{pod}",exported_namespace="{ns}"'
    else:
        who = f'container="notebook",pod="{pod}",namespace="{ns}"'
    return f"{metric}{{{base},{who}{extra}}} {value}\n"


def vector(*items):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1767225600.5, str(value)]} for labels, value in items]}}


def k8s_pod(name, user, gpus=1, phase="Running", ready=True, unschedulable=None, server=""):
    limits = {"cpu": "4"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": unschedulable}] if unschedulable else [{"type": "PodScheduled", "status": "True"}]
    return {
        "metadata": {"name": name, "namespace": "jhub", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"component": "singleuser-server", "hub.jupyter.org/username": user.replace("@", "-40"),
                                "hub.jupyter.org/servername": server},
                     "annotations": {"hub.jupyter.org/username": user}},
        "spec": {"nodeName": None if unschedulable else "gpu-1",
                 "containers": [{"name": "notebook", "resources": {"limits": limits},
                                 "ports": [{"name": "notebook-port", "containerPort": 8888}]}]},
        "status": {"phase": phase, "podIP": None if unschedulable else "127.5.0.3", "conditions": conditions,
                   "containerStatuses": [] if unschedulable else [{"name": "notebook", "ready": ready}]},
    }
