"""A userspace kube-proxy: makes Service addresses reachable on this machine where the
kernel's data plane (sim.network.dataplane: kube-proxy's nftables mode and NetworkPolicy) cannot
be had, that is without root or nftables. Then NetworkPolicies are not enforced.

For every Service with a cluster IP it listens on `clusterIP:port` (and on each
load-balancer address, sim.nodeagent.servicecontroller's) for each TCP port, and forwards every
connection to one of the Service's endpoints (`endpoints`), chosen at random as
kube-proxy's rules do, read from its EndpointSlices (what kube-proxy reads). A Service with
no endpoint refuses connections (reset), as kube-proxy's REJECT rule does. It follows
Services and EndpointSlices as they change, without polling.

`frontends` and `endpoints` are what any kube-proxy reads of a Service; sim.network.dataplane
uses them too.

Not simulated: UDP/SCTP, session affinity, `externalTrafficPolicy`/`internalTrafficPolicy`,
NodePorts, `externalIPs`, hairpin and source-IP preservation (the backend sees the
proxy's address as the client).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from dataclasses import dataclass
from typing import Any, Iterable

from ..objects import Change, Obj
from ..resources import BY_KIND

log = logging.getLogger("gpu_reclaim_sim.network.proxy")

SVC, SLICE = BY_KIND["Service"], BY_KIND["EndpointSlice"]
COPY_CHUNK = 65536
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # an EndpointSlice's Service (the endpointslice controller's)


def ingress_ips(svc: Obj) -> list[str]:
    """A LoadBalancer Service's addresses (its status, as the cloud's service controller wrote it)."""
    return [i["ip"] for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            if i.get("ip")]


@dataclass(frozen=True)
class Frontend:
    """One address a Service answers on."""

    namespace: str
    service: str
    port_name: str
    ip: str
    port: int


def frontends(svc: Any) -> list[Frontend]:
    """The addresses a Service answers on: each TCP port on its cluster IP and its
    load-balancer addresses."""
    meta, spec = svc["metadata"], svc.get("spec") or {}
    ips = [ip for ip in [spec.get("clusterIP")] + ingress_ips(svc) if ip and ip != "None"]
    return [Frontend(meta["namespace"], meta["name"], p.get("name") or "", ip, p["port"])
            for p in spec.get("ports") or [] if p.get("protocol", "TCP") == "TCP" for ip in ips]


def endpoints(slices: Iterable[Any]) -> dict[str, list[tuple[str, int]]]:
    """A Service's endpoints per port name, from its EndpointSlices: the ready ones, or
    when none is ready the serving ones that are terminating (kube-proxy's
    CategorizeEndpoints)."""
    ready: dict[str, list[tuple[str, int]]] = {}
    terminating: dict[str, list[tuple[str, int]]] = {}
    for s in slices:
        for e in s.get("endpoints") or []:
            cond = e.get("conditions") or {}
            into = ready if cond.get("ready") else terminating if cond.get("serving") and cond.get("terminating") \
                else None
            if into is None or not e.get("addresses"):
                continue
            for p in s.get("ports") or []:
                into.setdefault(p.get("name") or "", []).append((e["addresses"][0], p["port"]))
    return {name: sorted(ready.get(name) or terminating[name]) for name in {*ready, *terminating}}


def slices_of(store: Any, namespace: str, name: str) -> list[Any]:
    return [s for s in store.objects(SLICE) if s["metadata"].get("namespace") == namespace
            and (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == name]


class ServiceProxy:
    def __init__(self, source: Any) -> None:
        self.store = source  # Services and EndpointSlices: `objects`, `find`, `subscribe` (sim.network.dataplane's)
        self._listeners: dict[tuple[str, int], tuple[Frontend, asyncio.AbstractServer]] = {}
        self._backends: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._unsubscribe: list[Any] = []
        self._connections: set[asyncio.Task] = set()

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._unsubscribe = [self.store.subscribe(SVC, self._on_service),
                             self.store.subscribe(SLICE, self._on_slice)]
        for svc in self.store.objects(SVC):
            self._dirty.add((svc["metadata"]["namespace"], svc["metadata"]["name"]))
        self._wake.set()
        self._task = asyncio.create_task(self._run(), name="service-proxy")

    async def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _, server in self._listeners.values():
            server.close()
        self._listeners.clear()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def _on_service(self, change: Change) -> None:
        self._dirty.add((change.new["metadata"]["namespace"], change.new["metadata"]["name"]))
        self._wake.set()

    def _on_slice(self, change: Change) -> None:
        name = (change.new["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
        if name:
            self._dirty.add((change.new["metadata"]["namespace"], name))
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                ns, name = self._dirty.pop()
                try:
                    await self._sync(ns, name)
                except Exception:
                    log.exception("service proxy: syncing %s/%s", ns, name)

    # --- the rules ---------------------------------------------------------------------

    def backends(self, namespace: str, name: str, port_name: str) -> list[tuple[str, int]]:
        return list(self._backends.get((namespace, name, port_name), ()))

    def pick(self, frontend: Frontend, client: tuple[str, int]) -> tuple[str, int] | None:
        """The endpoint one connection goes to (None: refuse it)."""
        choices = self._backends.get((frontend.namespace, frontend.service, frontend.port_name))
        return random.choice(choices) if choices else None

    async def _sync(self, ns: str, name: str) -> None:
        svc = self.store.find(SVC, ns, name)
        wanted: dict[tuple[str, int], Frontend] = {}
        for key in [k for k in self._backends if k[:2] == (ns, name)]:
            del self._backends[key]
        if svc is not None:
            wanted = {(f.ip, f.port): f for f in frontends(svc)}
            self._backends.update({(ns, name, port_name): backends for port_name, backends
                                   in endpoints(slices_of(self.store, ns, name)).items()})
        for addr, (frontend, server) in list(self._listeners.items()):
            if (frontend.namespace, frontend.service) == (ns, name) and wanted.get(addr) != frontend:
                server.close()
                del self._listeners[addr]
        for addr, frontend in wanted.items():
            if addr in self._listeners:
                continue
            try:
                server = await asyncio.start_server(
                    functools.partial(self._accept, frontend), host=frontend.ip, port=frontend.port,
                    reuse_address=True)
            except OSError as e:
                log.warning("service proxy: cannot listen on %s:%s for %s/%s: %s", frontend.ip, frontend.port,
                            ns, name, e.strerror)
                continue
            self._listeners[addr] = (frontend, server)

    # --- connections -------------------------------------------------------------------

    async def _accept(self, frontend: Frontend, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            client = writer.get_extra_info("peername") or ("", 0)
            backend = self.pick(frontend, client)
            if backend is None:
                writer.transport.abort()  # no endpoint: refused, as kube-proxy's REJECT
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*backend)
            except OSError:
                writer.transport.abort()
                return
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            if task is not None:
                self._connections.discard(task)
            if not writer.is_closing():
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(COPY_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()
