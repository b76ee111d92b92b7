"""`jupyterhub-gpu-reclaim-sim run`: a scenario's cluster on the real Kubernetes control plane,
in one asyncio process: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager as child processes (sim.controlplane), and the node agent
(sim.nodeagent) for the scenario's nodes, with their GPUs, control endpoint, Services,
NetworkPolicies and volumes.

What a cluster's admin sets up after `kubeadm init` comes through the API: the scenario's
namespaces (each ready for pods: its default ServiceAccount and `kube-root-ca.crt` made by the
controller-manager) and priority classes; the agent installs the default StorageClass with
its provisioner. The run's kubeconfig is the admin's (`system:masters`, a client certificate
of the run's CA) in the scenario's own namespace.

Addresses (sim.network.namespace): a run started inside a run's network namespace (a test
worker's) stays there. Otherwise, as root, it makes one of its own, so that pods and Services
get the addresses a real cluster gives them; programs outside reach its API server and control
endpoint through ports of the machine's loopback bound before it entered (sim.network.relay),
which its info and kubeconfig name; `--publish` offers a Service there too (a browser's way to
the z2jh release's proxy-public). The other way, `--reach PORT` offers a port of the loopback
the run started on at the node network's address inside (its info's `reached`), which an
EndpointSlice may name (the demo's Prometheus as the release's service finds it). Without root
it stays on the machine's loopback and says what does not work there.

`--control-plane DIR` runs on a control plane already running (a test worker's): the run adds
its nodes, namespaces and priority classes to it and takes them away when it stops.

The scenario's user placeholders are z2jh's StatefulSet of pause pods (sim.userplaceholders),
which the real controller-manager keeps and the real scheduler preempts; its autoscaled node
groups get the agent's cluster autoscaler (sim.nodeagent.clusterautoscaler).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from .controlplane.components import ControlPlane
from .kubelet.nodes import GROUP_LABEL
from .network import namespace
from .network.relay import Outward, Relay
from .nodeagent.agent import NodeAgent
from .scenario import Scenario
from . import userplaceholders

log = logging.getLogger("gpu_reclaim_sim.cluster")

NAMESPACE_READY_S = 60.0
NAMESPACE_GONE_S = 120.0
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")  # the API server's own
STOP_S = 60.0  # what a run may take to stop on a shared control plane (launch.Child.stop's grace)
NO_NAMESPACE = ("not root: the cluster stays on this machine's loopback. Pods get loopback addresses, "
                "which the real API server refuses in EndpointSlices, so Services have no endpoints; "
                "run as root for a network namespace of the run's own")


@dataclass(frozen=True)
class Published:
    """A Service's port offered at a port of the machine's loopback, as a cloud's load balancer
    offers one to the world (`run --publish PORT=NAMESPACE/SERVICE:PORT`)."""
    port: int
    namespace: str
    service: str
    service_port: int

    @classmethod
    def parse(cls, text: str) -> "Published":
        m = re.fullmatch(r"(\d+)=([a-z0-9-]+)/([a-z0-9-]+):(\d+)", text)
        if not m or not 0 < int(m.group(1)) < 65536 or not 0 < int(m.group(4)) < 65536:
            raise ValueError(f"{text!r} is not PORT=NAMESPACE/SERVICE:PORT (e.g. 8000=jhub/proxy-public:80)")
        return cls(int(m.group(1)), m.group(2), m.group(3), int(m.group(4)))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service}:{self.service_port}"


@dataclass
class Cluster:
    scenario: Scenario
    data_dir: Path
    api_port: int = 0  # where programs outside reach the API server (0: a free port)
    publish: list[Published] = field(default_factory=list)  # Services offered on the machine's loopback
    reach: list[int] = field(default_factory=list)  # ports of the loopback the run started on, for its pods
    # a control plane already running (its folder), shared with the runs before and after this
    # one, in the network the run starts in: the run adds its nodes and namespaces, and takes
    # them away when it stops (a test worker's, one module after another)
    control_plane: Path | None = None
    plane: ControlPlane | None = None
    agent: NodeAgent | None = None
    relays: dict[str, Relay] = field(default_factory=dict)  # "api", "control" from outside; published Services
    outward: dict[int, Relay] = field(default_factory=dict)  # each port of `reach`'s, inside
    _admin: k8s.ApiClient | None = None
    _made: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) of what the run added to the cluster

    async def start(self) -> None:
        """Everything up; on a failure, what was started is stopped."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self._network()  # first: before any thread or socket (a namespace is per thread)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.control_plane is not None:
            plane = self.plane = ControlPlane.running(self.control_plane)
        else:
            plane = self.plane = ControlPlane(self.data_dir / "controlplane",
                                              port=0 if "api" in self.relays else self.api_port)
            await asyncio.to_thread(plane.start)
        self._admin = await k8s_config.new_client_from_config(str(plane.admin_kubeconfig))
        await self._set_up(self._admin)
        version = await asyncio.to_thread(plane.version)
        self.agent = NodeAgent(self.scenario, plane.server, plane.authority, version, self.data_dir)
        await self.agent.start()
        for name, url in (("api", plane.server), ("control", self._control_url())):
            if name in self.relays:
                target = urlsplit(url)
                await self.relays[name].start(target.hostname or "127.0.0.1", target.port or 0)
        for published in self.publish:
            await self.relays[str(published)].start_to(self._address_of(published))
        for port, relay in self.outward.items():
            await relay.start("127.0.0.1", port)
        log.info("cluster %r up on the real control plane: API %s, control %s", self.scenario.name,
                 self.api_url(), self.control_url())

    def _network(self) -> None:
        # bound first, in the namespace the run starts in (outside its own, if it makes one)
        self.relays = {str(p): Relay(p.port) for p in self.publish}
        if namespace.inside() or self.control_plane is not None:  # loopback is shared with the programs that started the run
            self.outward = {port: Relay(0, namespace.API_SERVER_ADDRESS) for port in self.reach}
            return
        if not namespace.available():
            log.warning("%s", NO_NAMESPACE)
            return
        # bound while still outside: they stay outside, and lead in
        self.relays.update(api=Relay(self.api_port), control=Relay(self.scenario.control_port))
        namespace.enter()
        origin = namespace.origin()
        assert origin is not None
        self.outward = {port: Outward(namespace.API_SERVER_ADDRESS, origin) for port in self.reach}

    async def _set_up(self, admin: k8s.ApiClient) -> None:
        core, scheduling = k8s.CoreV1Api(admin), k8s.SchedulingV1Api(admin)
        if self.control_plane is not None:
            await self._clear_left_behind(core, scheduling)
        for name in self.scenario.namespaces:
            if self.control_plane is not None and name not in SYSTEM_NAMESPACES:
                await self._clear(core, name)
            if await _create(core.create_namespace({"metadata": {"name": name}})):  # type: ignore[arg-type]
                self._made.append(("namespace", name))
        for pc in self.scenario.priority_classes:
            if await _create(scheduling.create_priority_class({  # type: ignore[arg-type]
                "metadata": {"name": pc["name"]}, "value": pc["value"],
                "globalDefault": pc.get("globalDefault", False), "description": pc.get("description", ""),
                "preemptionPolicy": pc.get("preemptionPolicy", "PreemptLowerPriority")})):
                self._made.append(("priorityclass", pc["name"]))
        async with asyncio.timeout(NAMESPACE_READY_S):
            for name in self.scenario.namespaces:
                await _ready(core, name)
        apps = k8s.AppsV1Api(admin)
        for p in self.scenario.placeholders:
            await _create(apps.create_namespaced_stateful_set(p.namespace, userplaceholders.statefulset(p)))  # type: ignore[arg-type]

    async def _clear_left_behind(self, core: k8s.CoreV1Api, scheduling: k8s.SchedulingV1Api) -> None:
        """On a shared control plane, what an earlier run added and could not take away (killed):
        its Nodes (with the pods bound to them), which no agent runs yet the scheduler would
        place pods on until their Leases expire, and its PriorityClasses (the API server refuses
        a second global default). One run at a time uses a plane (docs/sim.md); its namespaces
        are cleared one by one (`_clear`)."""
        for node in (await core.list_node(label_selector=GROUP_LABEL)).items:
            log.warning("node %s is an earlier run's, left behind: deleting it first", node.metadata.name)
            await forget_node(core, node.metadata.name)
        for pc in (await scheduling.list_priority_class()).items:
            if not pc.metadata.name.startswith("system-"):
                log.warning("priority class %s is an earlier run's, left behind: deleting it first", pc.metadata.name)
                await _deleted(scheduling.delete_priority_class(pc.metadata.name))

    async def _clear(self, core: k8s.CoreV1Api, name: str) -> None:
        """On a shared control plane, namespace `name` as no earlier run left it: one stopped
        before it had emptied it (killed) is deleted, and one being emptied waited for."""
        try:
            found = await core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        if found.status.phase != "Terminating":
            log.warning("namespace %s is an earlier run's, left behind: deleting it first", name)
            await _deleted(core.delete_namespace(name))
        async with asyncio.timeout(NAMESPACE_GONE_S):
            await _gone(core, name)

    async def _leave(self, admin: k8s.ApiClient) -> None:
        """What the run added taken away, before its nodes go (`forget_node`): its namespaces, which
        the namespace controller empties without the run (the next run on the plane waits for
        that, `_clear`; once one is terminating no controller makes a pod in it again), and its
        priority classes. Namespaces it found (`default`) keep what is in them."""
        core, scheduling = k8s.CoreV1Api(admin), k8s.SchedulingV1Api(admin)
        namespaces = [name for kind, name in self._made if kind == "namespace"]
        for name in namespaces:
            await _deleted(core.delete_namespace(name))
        for name in (name for kind, name in self._made if kind == "priorityclass"):
            await _deleted(scheduling.delete_priority_class(name))
        log.info("namespaces %s being deleted", namespaces)


    def _address_of(self, published: Published) -> Callable[[], Awaitable[tuple[str, int]]]:
        """Where a connection to `published` goes: its Service's load-balancer address, else its
        cluster IP, as the Service is at that moment."""
        async def address() -> tuple[str, int]:
            assert self._admin is not None
            try:
                svc = await k8s.CoreV1Api(self._admin).read_namespaced_service(published.service, published.namespace)
            except ApiException as e:
                raise LookupError(f"service {published}: {e.reason}") from None
            ingress = [i.ip for i in (svc.status.load_balancer.ingress or []) if i.ip] \
                if svc.status and svc.status.load_balancer else []
            return (ingress or [svc.spec.cluster_ip])[0], published.service_port
        return address

    def _control_url(self) -> str:
        return self._control_urls()[0]

    def _control_urls(self) -> list[str]:
        return list(self.agent.control.urls.values()) if self.agent and self.agent.control else [""]

    def api_url(self) -> str:
        """The API server as programs that started the run reach it."""
        assert self.plane is not None
        return f"https://127.0.0.1:{self.relays['api'].port}" if "api" in self.relays else self.plane.server

    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.relays['control'].port}" if "control" in self.relays else self._control_url()

    def reached(self) -> dict[str, str]:
        """Where the cluster's pods reach each port of `reach` (without a namespace: at itself)."""
        return {str(port): f"{namespace.API_SERVER_ADDRESS}:{self.outward[port].port}" if self.outward
                else f"127.0.0.1:{port}" for port in self.reach}

    async def stop(self) -> None:
        for relay in (*self.relays.values(), *self.outward.values()):
            await relay.stop()
        if self.control_plane is not None and self._admin is not None:
            await self._leave(self._admin)
        if self.agent is not None:
            await self.agent.stop()
        if self.control_plane is not None and self._admin is not None and self.agent is not None:
            for name in self.agent.registrations:
                await forget_node(k8s.CoreV1Api(self._admin), name)
        if self._admin is not None:
            await self._admin.close()
        if self.plane is not None:
            await asyncio.to_thread(self.plane.stop)

    def write_kubeconfig(self, path: str | Path, namespace: str | None = None) -> Path:
        """The admin's kubeconfig, for kubectl and the Kubernetes clients."""
        assert self.plane is not None
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.plane.authority.kubeconfig(path, self.api_url(), "admin", client=self.plane.admin,
                                               namespace=namespace or self.scenario.home_namespace)

    def info(self) -> dict[str, Any]:
        """Where things are, for the CLI's output and for test harnesses."""
        assert self.plane is not None and self.agent is not None and self.agent.local is not None
        network = self.agent.local.network
        return {
            "scenario": self.scenario.name,
            "api": self.api_url(),
            "api_secure": self.api_url(),
            "ca_file": str(self.plane.authority.cert),
            "control": self.control_url(),
            "metrics": self.control_url() + "/metrics",
            # where a Service's EndpointSlice may lead to them (not loopback)
            "metrics_in_cluster": self._control_urls()[-1] + "/metrics",
            "nodes": sorted(self.agent.registrations),
            "pod_network": str(network.pods.network),
            "service_network": str(network.services),
            "namespaces": self.scenario.namespaces,
            "data_dir": str(self.data_dir),
            "pids": {c.name: c.process.pid for c in self.plane.components},
            "audit_log": str(self.plane.audit_log),  # the requests of pods' ServiceAccounts and their answers
            "published": {str(p): f"127.0.0.1:{self.relays[str(p)].port}" for p in self.publish},
            "reached": self.reached(),  # "PORT": "HOST:PORT", for an EndpointSlice
        }


async def _create(request: Any) -> bool:
    """An object the cluster needs, left as it is if there; whether this made it."""
    try:
        await request
    except ApiException as e:
        if e.status != 409:
            raise
        return False
    return True


async def _ready(core: k8s.CoreV1Api, name: str) -> None:
    """Until the controller-manager has made the namespace's default ServiceAccount (the
    ServiceAccount admission plugin refuses pods before) and its kube-root-ca.crt (a pod's
    kube-api-access volume projects it)."""
    while True:
        accounts = await core.list_namespaced_service_account(name, field_selector="metadata.name=default")
        roots = await core.list_namespaced_config_map(name, field_selector="metadata.name=kube-root-ca.crt")
        if accounts.items and roots.items:
            return
        await asyncio.sleep(0.1)


async def forget_node(core: k8s.CoreV1Api, node: str) -> None:
    """A node whose agent has stopped, on a shared control plane: the pods bound to it deleted
    at once (their processes ended with the agent), as the pod GC would minutes later (a pod
    still being deleted gracefully is bound to a name the next run on the plane may register),
    then it. Only a departing node's: on a node that stays, a pod deleted at once frees its GPUs
    for the scheduler before its agent has ended it."""
    for pod in (await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")).items:
        await _deleted(core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0))
    await _deleted(core.delete_node(node))


async def _deleted(request: Any) -> None:
    """An object deleted, or gone already."""
    try:
        await request
    except ApiException as e:
        if e.status != 404:
            raise


async def _gone(core: k8s.CoreV1Api, name: str) -> None:
    """Until namespace `name` is no more."""
    while True:
        try:
            await core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        await asyncio.sleep(0.2)
