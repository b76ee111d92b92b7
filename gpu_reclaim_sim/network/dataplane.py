"""The cluster's data plane: kube-proxy in nftables mode for its Services, and the part of
a CNI network plugin that enforces NetworkPolicies, in one nftables table of its own
(sim.network.nftables; the policy model: sim.network.netpol).

It follows Services, EndpointSlices, NetworkPolicies, namespaces' and pods' labels as
they change (subscriptions to their source, no polling: the node agent's mirror of the real
API server, sim.nodeagent.nodeservices) and writes the whole table again, at most
once per `DEBOUNCE`, only when the rules changed. The kubelet tells it of each pod that
runs processes before its containers start and after they have all stopped (what CNI
ADD and DEL are to a real plugin): a new pod is in the rules before its first process
runs, as the NetworkPolicy docs require ("isolated before they are started"), and a
pod's cgroup is out of the rules before the kubelet removes it.

Needs root, nftables and a cgroup2 mount. Without them, sim.network.proxy's userspace forwarder
serves the Services and NetworkPolicies are stored but not enforced (a warning says so).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ..kubelet import cgroups
from . import netpol, nftables, podnet
from .proxy import SERVICE_NAME_LABEL, SLICE, SVC, ServiceProxy, endpoints, frontends
from ..resources import BY_KIND
from ..objects import Change, Obj

log = logging.getLogger("gpu_reclaim_sim.network.dataplane")

POD, NS, POLICY = BY_KIND["Pod"], BY_KIND["Namespace"], BY_KIND["NetworkPolicy"]
DEBOUNCE = 0.02  # seconds: a burst of changes costs one write (kube-proxy's minSyncPeriod is 1 s)
SYNC_TIMEOUT = 30.0


class DataPlane:
    def __init__(self, cluster: Any, source: Any) -> None:
        """`cluster`: the node agent's local parts (sim.nodeagent.local: its scenario and
        networks); `source`: where the objects come from, `objects`, `find` and `subscribe`
        (sim.nodeagent.nodeservices.ApiMirror, the API's objects as watches follow them)."""
        self.cluster = cluster
        self.store = source
        self.unavailable = ("no writable cgroup2 mount, or not root" if not cgroups.available()
                            else nftables.unavailable())
        self.proxy = ServiceProxy(self.store) if self.unavailable else None
        self.table = "" if self.unavailable else nftables.table_name()
        self.deny = cluster.scenario.network_policy_deny
        self.view = netpol.AddressView([cluster.network.pods.network, cluster.network.services])
        self._pods: dict[str, tuple[Obj, str, str]] = {}  # uid -> (pod, address, cgroup for nft)
        self._in_rules: set[str] = set()  # the cgroups the table now names
        self._changes = self._synced = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._applied = ""
        self._task: asyncio.Task | None = None
        self._unsubscribe: list[Any] = []

    @property
    def enforcing(self) -> bool:
        """Whether NetworkPolicies are enforced (and Services served by the kernel)."""
        return self.proxy is None

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.proxy is not None:
            log.warning("NetworkPolicies are not enforced and Services are proxied in userspace: %s",
                        self.unavailable)
            await self.proxy.start()
            return
        for table in await asyncio.to_thread(nftables.stale):
            log.info("removing nftables table %s of a simulator that is gone", table)
            await asyncio.to_thread(nftables.delete, table)
        changed = lambda change: self._changed()  # noqa: E731
        self._unsubscribe = [self.store.subscribe(SVC, changed), self.store.subscribe(SLICE, changed),
                             self.store.subscribe(POLICY, changed), self.store.subscribe(NS, self._on_namespace),
                             self.store.subscribe(POD, self._on_pod)]
        self._task = asyncio.create_task(self._run(), name="dataplane")
        await self._sync_now()

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            return
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._release_waiters(None)
        await asyncio.to_thread(nftables.delete, self.table)

    # --- CNI ADD and DEL, from the kubelet ---------------------------------------------------

    async def add_pod(self, pod: Obj, ip: str) -> None:
        """A pod that runs processes got `ip`: give it its cgroup (where its containers'
        cgroups will be) with the sockets of a network namespace of its own (sim.network.podnet),
        and put it in the rules before any of its processes starts."""
        if self.proxy is not None:
            return
        uid = pod["metadata"]["uid"]
        await asyncio.to_thread(cgroups.pod_dir(uid).mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(podnet.attach, cgroups.pod_dir(uid), ip)
        self._pods[uid] = (pod, ip, cgroups.nft_path(uid))
        if self.store.objects(POLICY):
            await self._sync_now()

    async def remove_pod(self, uid: str) -> None:
        """The pod's processes are gone: take it out of the rules (so that its cgroup can
        be removed: nft names cgroups by path)."""
        entry = self._pods.pop(uid, None)
        if entry is not None and entry[2] in self._in_rules:
            await self._sync_now()

    # --- changes ---------------------------------------------------------------------------

    def _changed(self) -> None:
        self._changes += 1
        self._wake.set()

    def _on_pod(self, change: Change) -> None:
        uid = change.new["metadata"]["uid"]
        entry = self._pods.get(uid)
        if entry is None or change.type == "DELETED":
            return
        labels = change.new["metadata"].get("labels") or {}
        self._pods[uid] = (change.new, entry[1], entry[2])
        if labels != (entry[0]["metadata"].get("labels") or {}) and self.store.objects(POLICY):
            self._changed()

    def _on_namespace(self, change: Change) -> None:
        old = (change.old or {}).get("metadata", {}).get("labels")
        if change.type != "MODIFIED" or old != change.new["metadata"].get("labels"):
            if self.store.objects(POLICY):
                self._changed()

    async def _sync_now(self) -> None:
        """Until the table holds what the source holds now."""
        self._changed()
        target = self._changes
        if self._task is None or self._task.done() or self._synced >= target:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), SYNC_TIMEOUT)
        except asyncio.TimeoutError:
            log.error("the data plane did not follow a change within %.0f s", SYNC_TIMEOUT)

    def _release_waiters(self, upto: int | None) -> None:
        keep = []
        for target, future in self._waiters:
            if upto is None or target <= upto:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self._waiters = keep

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(DEBOUNCE)
            self._wake.clear()
            target = self._changes
            try:
                await self._sync()
            except Exception as e:  # the table stays as it was; try again later
                log.error("data plane: writing nftables table %s failed: %s", self.table, e)
                asyncio.get_running_loop().call_later(1.0, self._changed)
            self._synced = target
            self._release_waiters(target)

    # --- the rules -------------------------------------------------------------------------

    async def _sync(self) -> None:
        routes = self.routes()
        policies = self.store.objects(POLICY)
        pods = [(pod, ip, cg) for pod, ip, cg in self._pods.values()] if policies else []
        namespaces = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.store.objects(NS)}
        compiled, script = await asyncio.to_thread(self._render, routes, policies, pods, namespaces)
        if script == self._applied:
            return
        await nftables.apply(script)
        self._applied = script
        self._in_rules = set(compiled.own) if compiled else set()

    def _render(self, routes: list[nftables.Route], policies: list[Obj], pods: list[tuple[Obj, str, str]],
                namespaces: dict[str, dict[str, str]]) -> tuple[netpol.Compiled | None, str]:
        compiled = None
        if policies:
            # a pod whose cgroup went meanwhile (nft would refuse its path) has no process left
            known = [netpol.Pod.of(pod, ip, cg) for pod, ip, cg in pods
                     if os.path.isdir(cgroups.NFT_ROOT / cg)]
            compiled = netpol.compile_policies(policies, known, namespaces, self.view)
        return compiled, nftables.render(self.table, routes, compiled, deny=self.deny,
                                         nodes=str(self.cluster.network.nodes.network),
                                         comment=f"jupyterhub-gpu-reclaim simulator {self.cluster.scenario.name!r}"
                                                 f" (pid {os.getpid()}): kube-proxy and NetworkPolicy")

    def routes(self) -> list[nftables.Route]:
        """Every TCP port of every Service, with its addresses and endpoints."""
        slices: dict[tuple[str, str], list[Obj]] = {}
        for s in self.store.objects(SLICE):
            name = (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
            if name:
                slices.setdefault((s["metadata"]["namespace"], name), []).append(s)
        out = []
        for svc in self.store.objects(SVC):
            meta = svc["metadata"]
            ports: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for f in frontends(svc):
                ports.setdefault((f.port_name, f.port), []).append((f.ip, f.port))
            backends = endpoints(slices.get((meta["namespace"], meta["name"]), []))
            for (port_name, port), fronts in ports.items():
                out.append(nftables.Route(f"{meta['namespace']}/{meta['name']}:{port_name or port}",
                                          tuple(fronts), tuple(backends.get(port_name, ()))))
        return sorted(out, key=lambda r: r.name)
