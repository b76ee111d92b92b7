"""The whole simulated cluster: store, API server, scheduler, kubelets, autoscaler,
placeholders, GPUs and the control endpoint, wired together and started in one loop.

Every component gets this object and reads what it needs from it:
- `store` (sim.store.Store) and `events` (sim.events.EventRecorder);
- `scenario` (sim.scenario.Scenario), `data_dir` (Path; PVCs, pod logs);
- `images` (sim.images.ImageRegistry), `network` (sim.network.PodNetwork),
  `gpus` (sim.gpus.GpuFleet);
- `create(rtype, obj, namespace)`: a create that passes validation, defaulting and
  admission exactly like one through the API (controllers use it for the pods they make).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from pathlib import Path
from typing import Any

import yaml

from . import admission
from .apiserver import ApiServer
from .autoscaler import Autoscaler
from .control import ControlServer
from .events import EventRecorder
from .gpus import GpuFleet
from .images import ImageRegistry
from .kubelet import Kubelet
from .network import PodNetwork
from .placeholders import PlaceholderController
from .resources import BY_KIND, ResourceType
from .scenario import NodeGroup, Scenario
from .scheduler import Scheduler
from .serviceaccounts import ServiceAccountController
from .store import Filter, Obj, Store

log = logging.getLogger("jupyterhub_gpu_reclaim.sim")


class Cluster:
    def __init__(self, scenario: Scenario, data_dir: str | Path, *, token: str | None = None) -> None:
        self.scenario = scenario
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.token = token or secrets.token_urlsafe(24)
        self.store = Store(history_limit=scenario.history_limit)
        self.events = EventRecorder(self.store)
        self.images = ImageRegistry(scenario)
        self.network = PodNetwork(scenario.pod_network)
        self.gpus = GpuFleet(scenario)
        self.apiserver = ApiServer(self)
        self.serviceaccounts = ServiceAccountController(self.store, self.create, self.apiserver.ca_pem)
        self.control = ControlServer(self)
        self.scheduler = Scheduler(self)
        self.autoscaler = Autoscaler(self)
        self.placeholders = PlaceholderController(self)
        self.kubelets: dict[str, Kubelet] = {}
        self._node_counter: dict[str, int] = {}
        self._event_expiry: asyncio.Task | None = None
        self._pod_router: asyncio.Task | None = None
        self.started = False

    # --- objects ---------------------------------------------------------------------

    def create(self, rtype: ResourceType, obj: Obj, namespace: str | None = None) -> Obj:
        prepared = admission.admit_create(self.store, rtype, obj, namespace)
        return self.store.create(rtype, prepared, namespace)

    # --- nodes -----------------------------------------------------------------------

    def group(self, name: str) -> NodeGroup:
        for g in self.scenario.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    async def add_node(self, group: NodeGroup) -> str:
        """Start a kubelet for a new node of `group`; it registers the Node object."""
        index = self._node_counter.get(group.name, 0) + 1
        self._node_counter[group.name] = index
        name = f"{group.name}-{index}"
        kubelet = Kubelet(self, name, group)
        self.kubelets[name] = kubelet
        await kubelet.start()
        return name

    async def remove_node(self, name: str) -> None:
        kubelet = self.kubelets.pop(name)
        await kubelet.stop(delete_node=True)

    async def _route_pods(self) -> None:
        """Hand each change of a bound pod to its node's kubelet."""
        watch = self.store.watch(Filter(BY_KIND["Pod"]))
        try:
            async for type_, pod in watch:
                kubelet = self.kubelets.get(pod.get("spec", {}).get("nodeName") or "")
                if kubelet is not None:
                    kubelet.on_pod(type_, pod)
        finally:
            watch.close()

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        for ns in self.scenario.namespaces:
            if self.store.find(BY_KIND["Namespace"], None, ns) is None:
                self.create(BY_KIND["Namespace"], {"metadata": {"name": ns}})
        for pc in self.scenario.priority_classes:
            self.create(BY_KIND["PriorityClass"], {
                "metadata": {"name": pc["name"]},
                "value": pc["value"],
                "globalDefault": pc.get("globalDefault", False),
                "description": pc.get("description", ""),
                "preemptionPolicy": pc.get("preemptionPolicy", "PreemptLowerPriority"),
            })
        self._pod_router = asyncio.create_task(self._route_pods())
        await self.apiserver.start()
        await self.control.start()
        await self.gpus.start()
        for group in self.scenario.node_groups:
            for _ in range(group.count):
                await self.add_node(group)
        await self.scheduler.start()
        await self.autoscaler.start()
        await self.placeholders.start()
        self._event_expiry = asyncio.create_task(self.events.expire_forever(self.scenario.event_ttl))
        self.started = True
        log.info("simulated cluster %r up: API %s, control %s",
                 self.scenario.name, self.apiserver.url, self.control.url)

    async def stop(self) -> None:
        for task in (self._event_expiry, self._pod_router):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.placeholders.stop()
        await self.autoscaler.stop()
        await self.scheduler.stop()
        await asyncio.gather(*(k.stop(delete_node=False) for k in self.kubelets.values()))
        await self.gpus.stop()
        await self.control.stop()
        await self.apiserver.stop()
        self.store.close()
        self.network.close()
        self.started = False

    def pod_log_path(self, namespace: str, pod: str, container: str) -> Path:
        """Where a container's output goes (`kubectl logs` reads it)."""
        return self.data_dir / "logs" / f"{namespace}_{pod}_{container}.log"

    # --- clients ---------------------------------------------------------------------

    def kubeconfig(self, namespace: str | None = None) -> dict[str, Any]:
        """A kubeconfig kubectl and the Kubernetes clients accept."""
        name = "gpu-reclaim-sim"
        # the scenario's own namespace (jhub in the demo), else "default" as on a new cluster
        own = [n for n in self.scenario.namespaces if n not in ("default", "kube-system")]
        ns = namespace or (own[-1] if own else "default")
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": self.apiserver.kubeconfig_cluster()}],
            "users": [{"name": name, "user": {"token": self.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": ns}}],
            "current-context": name,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, namespace: str | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(namespace), sort_keys=False))
        return path

    def info(self) -> dict[str, Any]:
        """Where things are, for the CLI's output and for test harnesses."""
        return {
            "scenario": self.scenario.name,
            "api": self.apiserver.url,
            "api_secure": self.apiserver.secure_url,  # HTTPS, where ServiceAccount tokens are meant for
            "ca_file": str(self.apiserver.ca_file),
            "control": self.control.url,
            "metrics": self.control.url + "/metrics",
            "nodes": sorted(self.kubelets),
            "pod_network": str(self.network.pods.network),
            "namespaces": self.scenario.namespaces,
            "data_dir": str(self.data_dir),
        }

    def info_json(self) -> str:
        return json.dumps(self.info(), indent=2)
