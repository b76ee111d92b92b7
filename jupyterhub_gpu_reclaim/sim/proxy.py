"""A userspace kube-proxy: makes Service addresses reachable on this machine.

For every Service with a cluster IP it listens on `clusterIP:port` (and on each
load-balancer address, sim.loadbalancers) for each TCP port, and forwards every
connection to one of the Service's ready endpoints, chosen at random as kube-proxy's
iptables rules do, read from its EndpointSlices (what kube-proxy reads). A Service with
no ready endpoint refuses connections (reset), as kube-proxy's REJECT rule does. It
follows Services and EndpointSlices as they change, without polling.

The data plane seam: `ServiceProxy.pick(frontend, client)` chooses the backend of one
connection (None refuses it). A NetworkPolicy-aware data plane overrides it (or
replaces this class, keeping `start`/`stop`), seeing which client opens which
connection to which Service port; `backends(namespace, name, port_name)` gives the
current ready endpoints.

Not simulated: UDP/SCTP, session affinity, `externalTrafficPolicy`/`internalTrafficPolicy`,
NodePorts, `externalIPs`, hairpin and source-IP preservation (the backend sees the
proxy's address as the client).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any

from .endpoints import SERVICE_NAME_LABEL
from .loadbalancers import ingress_ips
from .resources import BY_KIND
from .store import Change

log = logging.getLogger("jupyterhub_gpu_reclaim.sim.proxy")

SVC, SLICE = BY_KIND["Service"], BY_KIND["EndpointSlice"]
COPY_CHUNK = 65536


@dataclass(frozen=True)
class Frontend:
    """One address a Service answers on."""

    namespace: str
    service: str
    port_name: str
    ip: str
    port: int


class ServiceProxy:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store = cluster.store
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
            spec = svc.get("spec") or {}
            ips = [ip for ip in [spec.get("clusterIP")] + ingress_ips(svc) if ip and ip != "None"]
            for p in spec.get("ports") or []:
                if p.get("protocol", "TCP") != "TCP":
                    continue
                for ip in ips:
                    wanted[(ip, p["port"])] = Frontend(ns, name, p.get("name") or "", ip, p["port"])
            self._backends.update(self._ready_endpoints(ns, name))
        for addr, (frontend, server) in list(self._listeners.items()):
            if (frontend.namespace, frontend.service) == (ns, name) and wanted.get(addr) != frontend:
                server.close()
                del self._listeners[addr]
        for addr, frontend in wanted.items():
            if addr in self._listeners:
                continue
            try:
                server = await asyncio.start_server(
                    lambda r, w, f=frontend: self._accept(f, r, w), host=frontend.ip, port=frontend.port,
                    reuse_address=True)
            except OSError as e:
                log.warning("service proxy: cannot listen on %s:%s for %s/%s: %s", frontend.ip, frontend.port,
                            ns, name, e.strerror)
                continue
            self._listeners[addr] = (frontend, server)

    def _ready_endpoints(self, ns: str, name: str) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
        out: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
        for s in self.store.objects(SLICE):
            if s["metadata"].get("namespace") != ns or \
                    (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) != name:
                continue
            ready = [e["addresses"][0] for e in s.get("endpoints") or []
                     if (e.get("conditions") or {}).get("ready") and e.get("addresses")]
            for p in s.get("ports") or []:
                out.setdefault((ns, name, p.get("name") or ""), []).extend((ip, p["port"]) for ip in ready)
        return out

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
