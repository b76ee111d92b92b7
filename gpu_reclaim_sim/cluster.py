"""The whole simulated cluster: store, API server, scheduler, kubelets, autoscaler,
placeholders, GPUs and the control endpoint, wired together and started in one loop.

Every component gets this object and reads what it needs from it:
- `store` (sim.store.Store) and `events` (sim.events.EventRecorder);
- `scenario` (sim.scenario.Scenario), `data_dir` (Path; PVCs, pod logs);
- `images` (sim.kubelet.images.ImageRegistry), `network` (sim.network.addresses.PodNetwork),
  `gpus` (sim.gpu.gpus.GpuFleet);
- `gc` (sim.controllers.gc.GarbageCollector: also the index of who owns what), the workload,
  endpoints, load-balancer and volume controllers, `dataplane` (sim.network.dataplane.DataPlane:
  kube-proxy and NetworkPolicy) and `hosts` (sim.kubelet.names.HostsFiles, the pods' /etc/hosts);
- `create(rtype, obj, namespace)`: the one create path, validation, defaulting and
  admission, for API requests and for what the controllers make;
- `service_account_token(...)`: the TokenRequest the kubelet makes for a pod's token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .rbac import authn, serviceaccounts
from .admission.pipeline import admit_create
from .apiserver.server import ApiServer
from .controllers.autoscaler import Autoscaler
from .control import ControlServer
from .controllers.daemonsets import DaemonSetController
from .network.dataplane import DataPlane
from .controllers.deployments import DeploymentController, ReplicaSetController
from .controllers.endpoints import EndpointsController
from .events import EventRecorder
from .controllers.gc import GarbageCollector
from .gpu.gpus import GpuFleet
from .kubelet.images import ImageRegistry
from .kubelet.kubelet import Kubelet
from .network.loadbalancers import LoadBalancerController
from .kubelet.names import HostsFiles
from .network.addresses import PodNetwork
from .api.storageclasses import default_storage_class
from .controllers.persistentvolumes import VolumeController
from .controllers.placeholders import PlaceholderController
from .rbac.authorizer import RBAC_KINDS
from .rbac.escalation import confirm_no_escalation
from .resources import BY_KIND, ResourceType
from .scenario import NodeGroup, Scenario
from .scheduler.scheduler import Scheduler
from .rbac.serviceaccounts import ServiceAccountController
from .controllers.statefulsets import StatefulSetController
from .store import Filter, Obj, Store

log = logging.getLogger("gpu_reclaim_sim")


class Cluster:
    def __init__(self, scenario: Scenario, data_dir: str | Path, *, token: str | None = None) -> None:
        self.scenario = scenario
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.token = token or secrets.token_urlsafe(24)
        self.store = Store(history_limit=scenario.history_limit)
        self.events = EventRecorder(self.store)
        self.images = ImageRegistry(scenario)
        self.network = PodNetwork(scenario.pod_network, service_cidr=scenario.service_network)
        self.store.service_cidr = self.network.services
        self.gpus = GpuFleet(scenario)
        self.apiserver = ApiServer(self)
        self.serviceaccounts = ServiceAccountController(self.store, self.create, self.apiserver.ca_pem)
        self.control = ControlServer(self.gpus, self.token, self._pod_uid, scenario.control_host, scenario.control_port)
        self.scheduler = Scheduler(self, names=scenario.scheduler_names)
        self.autoscaler = Autoscaler(self)
        self.placeholders = PlaceholderController(self)
        # kube-controller-manager's controllers, the cloud's load balancers, kube-proxy
        self.gc = GarbageCollector(self)
        self.controllers = [
            self.gc, ReplicaSetController(self, self.gc), DeploymentController(self, self.gc),
            StatefulSetController(self, self.gc), DaemonSetController(self, self.gc),
            EndpointsController(self, self.gc), LoadBalancerController(self), VolumeController(self),
        ]
        self.dataplane = DataPlane(self)
        self.hosts = HostsFiles(self.store)
        self.kubelets: dict[str, Kubelet] = {}
        self._node_counter: dict[str, int] = {}
        self._event_expiry: asyncio.Task | None = None
        self._pod_router: asyncio.Task | None = None
        self.started = False

    # --- objects ---------------------------------------------------------------------

    def create(self, rtype: ResourceType, obj: Obj, namespace: str | None = None, *,
               user: authn.UserInfo | None = None, schema_valid: bool = False, dry_run: bool = False) -> Obj:
        """The one way an object is created, for the API and the controllers alike:
        admission (`schema_valid`: the API's decoder has checked the schema), then for a
        request's `user` the RBAC registry's escalation check, then the store (not for a
        `dry_run`). Returns the object as stored (or as it would be)."""
        prepared = admit_create(self.store, rtype, obj, namespace, schema_valid=schema_valid)
        if user is not None and rtype.kind in RBAC_KINDS:
            confirm_no_escalation(self.apiserver.authorizer, user, rtype.kind, prepared)
        return prepared if dry_run else self.store.create(rtype, prepared, namespace)

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
        for controller in self.controllers:
            await controller.start()
        if self.store.find(BY_KIND["StorageClass"], None, default_storage_class()["metadata"]["name"]) is None:
            self.create(BY_KIND["StorageClass"], default_storage_class())
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
        await self.dataplane.start()
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
        for controller in reversed(self.controllers):
            await controller.stop()
        await self.autoscaler.stop()
        await self.scheduler.stop()
        await asyncio.gather(*(k.stop(delete_node=False) for k in self.kubelets.values()))
        await self.gpus.stop()
        await self.control.stop()
        await self.apiserver.stop()
        await self.dataplane.stop()
        self.hosts.close()
        self.store.close()
        self.network.close()
        self.started = False

    def _pod_uid(self, namespace: str, pod: str) -> str | None:
        found = self.store.find(BY_KIND["Pod"], namespace, pod)
        return found["metadata"]["uid"] if found else None

    def pod_log_path(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
        return paths.pod_log_path(self.data_dir, namespace, pod, container, previous)

    def service_account_token(self, namespace: str, name: str, *, pod: Obj, expiration_seconds: int,
                              audience: str | None) -> str:
        """A token of the service account `name`, bound to `pod`: the TokenRequest the
        kubelet makes to fill a projected `serviceAccountToken` volume source."""
        spec = {"expirationSeconds": expiration_seconds, "audiences": [audience] if audience else [],
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                                   "uid": pod["metadata"]["uid"]}}
        answer = serviceaccounts.token_request(self.apiserver.tokens, self.store, namespace, name, {"spec": spec})
        return answer["status"]["token"]

    # --- clients ---------------------------------------------------------------------

    def kubeconfig(self, namespace: str | None = None) -> dict[str, Any]:
        """A kubeconfig kubectl and the Kubernetes clients accept."""
        name = "gpu-reclaim-sim"
        ns = namespace or self.scenario.home_namespace
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
            "service_network": str(self.network.services),
            "namespaces": self.scenario.namespaces,
            "data_dir": str(self.data_dir),
        }

    def info_json(self) -> str:
        return json.dumps(self.info(), indent=2)
