"""The node agent: what kubelets, device plugins and a CNI give a real cluster, for the
simulated nodes of a scenario, through the real API server only. Each node authenticates as
itself (`system:node:<name>`, a certificate from the run's CA), so the Node authorizer and
NodeRestriction hold it to its own Node, Lease and pods.

It registers the scenario's nodes and keeps them alive (`registration`), and runs the pods
the scheduler binds to them as local processes (`nodepods`), in `data_dir` (their files and logs),
and serves each node's kubelet API at its address (`kubeletserver`) for the API server to
proxy `kubectl logs`, `exec` and `attach` to. Their Services and NetworkPolicies are served
as kube-proxy, cluster DNS and a network plugin serve them (`nodeservices`); it installs the
plugin's ClusterRole as a cluster's admin would (it holds the run's CA: `networkplugin`), and
the default StorageClass, whose volumes it provisions (`provisioner`), and is the cloud's
service controller: LoadBalancer Services' addresses (`servicecontroller`).
The GPUs of its nodes are one fleet (sim.gpu.gpus: what each node's device plugin hands out and
dcgm-exporter reports), served with `use_gpu`'s endpoint by sim.control.ControlServer, which
finds a pod's UID among its pod workers. `kubectl port-forward` goes to the kubelet API too
(`portforward`). Nodes come and go at run time too (`add_node`, `remove_node`), as a cloud adds
and deletes machines for the cluster autoscaler that the agent runs for the scenario's
autoscaled node groups (`clusterautoscaler`).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes_asyncio import client as k8s

from ..control import ControlServer
from ..controlplane.credentials import Authority
from ..kubelet.nodes import node_manifest
from ..kubelet.podworker import PodWorker
from ..network import namespace
from ..network.addresses import AddressPool
from ..scenario import NodeGroup, Scenario
from . import clusterautoscaler, clusterroles, networkplugin, provisioner, servicecontroller
from .clusterautoscaler import Autoscaler
from .kubeletserver import KubeletServer
from .local import NodeLocal
from .nodepods import NodePods
from .registration import NodeRegistration
from .nodeservices import PROXY_USER, NodeServices

NODE_NETWORK = "127.100.0.0/16"


def node_names(scenario: Scenario) -> list[tuple[str, int]]:
    """(node name, index of its group) for every node the scenario starts with: `<group>-<n>`."""
    return [(f"{g.name}-{n}", i) for i, g in enumerate(scenario.node_groups) for n in range(1, g.count + 1)]


@dataclass
class NodeAgent:
    scenario: Scenario
    server: str
    authority: Authority
    version: str
    data_dir: Path
    registrations: dict[str, NodeRegistration] = field(default_factory=dict)
    pods: dict[str, NodePods] = field(default_factory=dict)
    servers: dict[str, KubeletServer] = field(default_factory=dict)
    local: NodeLocal | None = None
    services: NodeServices | None = None
    control: ControlServer | None = None
    provisioner: provisioner.Provisioner | None = None
    balancers: servicecontroller.ServiceController | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # the control endpoint's admin
    autoscaler: Autoscaler | None = None
    _clients: list[k8s.ApiClient] = field(default_factory=list)
    _node_tasks: dict[str, list[asyncio.Task[None]]] = field(default_factory=dict)  # node -> its kubelet's
    _node_clients: dict[str, k8s.ApiClient] = field(default_factory=dict)
    _addresses: AddressPool = field(default_factory=lambda: AddressPool(NODE_NETWORK))

    def client(self, node: str) -> k8s.ApiClient:
        """An API client that is `node` to the API server."""
        api = self._node_clients[node] = self._client(f"node-{node}", f"system:node:{node}", ("system:nodes",))
        return api

    def _client(self, file: str, user: str, groups: tuple[str, ...]) -> k8s.ApiClient:
        issued = self.authority.issue(file, user, groups)
        config = k8s.Configuration(host=self.server)
        config.ssl_ca_cert, config.cert_file, config.key_file = str(self.authority.cert), str(issued.cert), str(issued.key)
        api = k8s.ApiClient(config)
        self._clients.append(api)
        return api

    async def start(self) -> None:
        local = self.local = NodeLocal(self.scenario, self.data_dir)
        admin = self._client("add-on-installer", "gpu-reclaim-sim:installer", ("system:masters",))
        for add_on in (networkplugin, provisioner, servicecontroller):  # as their manifests install them
            await clusterroles.install(admin, add_on.USER, add_on.RULES)
        await provisioner.install_storage_class(admin)
        self.provisioner = provisioner.Provisioner(self._client("provisioner", provisioner.USER, ()),
                                                   self.data_dir / "volumes")
        self.balancers = servicecontroller.ServiceController(
            self._client("service-controller", servicecontroller.USER, ()))
        for part in (self.provisioner, self.balancers):
            part.start()
        self.services = NodeServices(self._client("kube-proxy", PROXY_USER, ()),
                                     self._client("network-plugin", networkplugin.USER, ()), local)
        await self.services.start()
        local.hosts, local.dataplane = self.services.hosts, self.services.dataplane
        s = self.scenario
        # pods reach it at the scenario's host (loopback: to a NetworkPolicy the machine, outside
        # the cluster, as the GPU it stands for is no pod's peer); in the run's network namespace
        # also at the machine's address there, which an EndpointSlice may name (the release's
        # dcgm-exporter Service) where it refuses loopback
        also = (namespace.API_SERVER_ADDRESS,) if namespace.inside() else ()
        local.control = self.control = ControlServer(local.gpus, self.token, self._pod_uid, s.control_host,
                                                     s.control_port, also)
        await self.control.start()
        await local.gpus.start()
        for name, index in node_names(self.scenario):
            await self.add_node(self.scenario.node_groups[index], name)
        if any(g.autoscaler for g in s.node_groups):
            self.autoscaler = Autoscaler(self, self._client("cluster-autoscaler", clusterautoscaler.USER, ()),
                                         self.scenario.node_groups)
            await clusterroles.install(admin, clusterautoscaler.USER, clusterautoscaler.RULES)
            self.autoscaler.start()

    async def add_node(self, group: NodeGroup, name: str | None = None) -> str:
        """Register a node of `group` and run its kubelet parts (its Lease, its kubelet API, its
        pods' workers): the scenario's at the start, the autoscaler's later. `name`: by default
        the group's next `<group>-<n>` not taken."""
        assert self.local is not None
        if name is None:
            taken = set(self.registrations)
            name = next(f"{group.name}-{n}" for n in itertools.count(1) if f"{group.name}-{n}" not in taken)
        address, api = self._addresses.allocate(), self.client(name)
        server = self.servers[name] = KubeletServer(name, address, self.authority, api, self._finder(name))
        port = await server.start()
        manifest = node_manifest(name, group, self.scenario, self.local.images, address, version=self.version,
                                 port=port, features=server.features)
        registration = self.registrations[name] = NodeRegistration(api, manifest)
        await registration.register()
        pods = self.pods[name] = NodePods(self.local, api, name, group, address, manifest)
        self._node_tasks[name] = [asyncio.create_task(registration.run(), name=f"node {name}"),
                                  asyncio.create_task(pods.run(), name=f"pods of {name}")]
        return name

    async def remove_node(self, name: str) -> None:
        """Stop a node's kubelet parts, as a machine the cloud deletes stops (its Node object
        is the caller's to delete: the autoscaler's, as cluster-autoscaler deletes it)."""
        tasks = self._node_tasks.pop(name, [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # the pods' workers stop their containers
        server = self.servers.pop(name, None)
        if server is not None:
            await server.stop()
        self.pods.pop(name, None)
        self.registrations.pop(name, None)
        self._addresses.release(server.address if server else None)
        if (api := self._node_clients.pop(name, None)) is not None:
            self._clients.remove(api)
            await api.close()

    def _finder(self, node: str) -> Callable[[str, str], PodWorker | None]:
        """The worker of a pod on `node` by namespace and name (what its kubelet API serves)."""
        return lambda namespace, pod: self.pods[node].worker(namespace, pod) if node in self.pods else None

    def _pod_uid(self, namespace: str, pod: str) -> str | None:
        """The UID of a pod that runs on one of the agent's nodes (the control endpoint's)."""
        workers = [w for pods in self.pods.values() if (w := pods.worker(namespace, pod))]
        return workers[0].uid if workers else None

    async def stop(self) -> None:
        if self.autoscaler is not None:
            await self.autoscaler.stop()
        for server in self.servers.values():
            await server.stop()
        tasks = [t for node in self._node_tasks.values() for t in node]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.services is not None:
            await self.services.stop()
        if self.control is not None:
            await self.control.stop()
        for part in (self.provisioner, self.balancers):
            if part is not None:
                await part.stop()
        for api in self._clients:
            await api.close()
        if self.local is not None:
            await self.local.gpus.stop()
            self.local.close()


async def serve(scenario: Scenario, server: str, pki: Path, version: str, data_dir: Path) -> None:
    """Run the agent until cancelled (SIGTERM: __main__)."""
    agent = NodeAgent(scenario, server, Authority(pki), version, data_dir)
    try:
        await agent.start()
        print(f"control endpoint: {agent.control.url if agent.control else ''}", flush=True)
        print(f"nodes registered: {' '.join(agent.registrations)}", flush=True)
        await asyncio.Event().wait()
    finally:
        await agent.stop()
