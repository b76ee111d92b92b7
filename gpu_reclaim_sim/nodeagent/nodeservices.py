"""Services on the real control plane, as kube-proxy and cluster DNS give them to the pods of
the node agent's machine (issue 37).

`ApiMirror` keeps the Services, EndpointSlices (written by the real controller-manager, and the
API server's own for the `kubernetes` Service) and Endpoints (headless Services' pods) of every
namespace as the API server has them, and the NetworkPolicies, namespaces and pods the network
plugin reads (sim.nodeagent.networkplugin), one informer-style `ListWatch` each, and offers them
as `objects`, `find` and `subscribe`, what the data plane reads. From it
`NodeServices` runs the simulator's data plane (sim.network.dataplane: kube-proxy's nftables
rules, DNAT from each cluster IP to the ready endpoints, and the NetworkPolicies' rules) and
keeps the pods' hosts files (sim.kubelet.names: the Service names cluster DNS would answer)
current.

The mirror reads as `system:kube-proxy`, the user the API server's bootstrap policy binds to
`system:node-proxier` (list and watch of Services, Endpoints, EndpointSlices): what a real
kube-proxy is. Cluster DNS (CoreDNS) reads the same with a role of its own.
Not here: UDP, DNS proper (sim.kubelet.names).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes_asyncio import client as k8s

from ..kubelet.names import HostsFiles
from ..network.dataplane import DataPlane
from ..resources import BY_KIND, ResourceType
from ..objects import Change, Obj
from . import networkplugin
from .podwatch import ListWatch

SVC, SLICE, EP = BY_KIND["Service"], BY_KIND["EndpointSlice"], BY_KIND["Endpoints"]
PROXY_USER = "system:kube-proxy"
SYNC_TIMEOUT_S = 30.0


class ApiMirror:
    """Objects of some kinds, all namespaces, kept current from the API server."""

    def __init__(self, lists: list[tuple[ResourceType, Callable[..., Any]]]) -> None:
        """`lists`: each kind with the kubernetes_asyncio method that lists it in all namespaces."""
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {t.plural: {} for t, _ in lists}
        self._subscribers: dict[str, list[Callable[[Change], None]]] = {t.plural: [] for t, _ in lists}
        self.watches = [ListWatch(call, f"mirror of {t.plural}", self._handler(t)) for t, call in lists]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start following; return once every kind has been listed (an informer's HasSynced)."""
        self._tasks = [asyncio.create_task(w.run(), name=w.what) for w in self.watches]
        async with asyncio.timeout(SYNC_TIMEOUT_S):
            while not all(w.lists for w in self.watches):
                if done := [t for t in self._tasks if t.done()]:
                    done[0].result()  # a watch that ended: its error
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- what the data plane reads ----------------------------------------------------------

    def objects(self, rtype: ResourceType) -> Iterable[Obj]:
        return list(self._objects.get(rtype.plural, {}).values())

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self._objects.get(rtype.plural, {}).get((namespace or "", name))

    def subscribe(self, rtype: ResourceType | None, callback: Callable[[Change], None]) -> Callable[[], None]:
        """`callback(change)` after each change of `rtype` (of a kind not mirrored: never)."""
        subscribers = self._subscribers.get(rtype.plural, []) if rtype is not None else []
        subscribers.append(callback)
        return lambda: subscribers.remove(callback) if callback in subscribers else None

    def _handler(self, rtype: ResourceType) -> Callable[[str, Obj], None]:
        bucket, subscribers = self._objects[rtype.plural], self._subscribers[rtype.plural]

        def handle(type_: str, obj: Obj) -> None:
            meta = obj["metadata"]
            key = (meta.get("namespace") or "", meta["name"])
            old = bucket.pop(key, None) if type_ == "DELETED" else bucket.get(key)
            if type_ != "DELETED":
                bucket[key] = obj
            change = Change(int(meta.get("resourceVersion") or 0), type_, rtype, old, obj)
            for callback in list(subscribers):
                callback(change)
        return handle


class NodeServices:
    """kube-proxy, cluster DNS and NetworkPolicy for the pods of `local`
    (sim.nodeagent.local.NodeLocal), from the API server `proxy` talks to as `PROXY_USER` and
    `plugin` as the network plugin (sim.nodeagent.networkplugin)."""

    def __init__(self, proxy: k8s.ApiClient, plugin: k8s.ApiClient, local: Any) -> None:
        core, discovery = k8s.CoreV1Api(proxy), k8s.DiscoveryV1Api(proxy)
        self.mirror = ApiMirror([(SVC, core.list_service_for_all_namespaces),
                                 (SLICE, discovery.list_endpoint_slice_for_all_namespaces),
                                 (EP, core.list_endpoints_for_all_namespaces), *networkplugin.lists(plugin)])
        self.dataplane = DataPlane(local, self.mirror)
        self.hosts = HostsFiles(self.mirror)

    async def start(self) -> None:
        """Once the rules hold every Service the API server has (so that a pod started next
        finds the `kubernetes` Service, as a kubelet waits for its Service informer)."""
        await self.mirror.start()
        await self.dataplane.start()

    async def stop(self) -> None:
        self.hosts.close()
        await self.dataplane.stop()
        await self.mirror.stop()
