"""The endpoints and EndpointSlice controllers: which pods back each Service.

For a Service with a selector, the pods of its namespace that match it and have an IP
are its endpoints; each Service port's `targetPort` is resolved per pod (a name is looked
up among the pod's container ports, with the same protocol: `podutil.FindPort`), and a
pod that has none of the ports is left out.
- `Endpoints` (core/v1, named as the Service): ready pods under `addresses`, the others
  under `notReadyAddresses` (all under `addresses` with `publishNotReadyAddresses`),
  terminating and finished pods left out, subsets grouped by resolved ports.
- `EndpointSlices` (discovery.k8s.io/v1, `<service>-<5 random>`, owned by the Service and
  labelled `kubernetes.io/service-name`): one per distinct port mapping, terminating pods
  included with `ready: false, terminating: true`; an empty placeholder slice when no pod
  matches. kube-proxy (sim.network.dataplane) reads these.
A Service without a selector is left alone: its Endpoints are the user's to write.

Not simulated: the 100-endpoint split of slices, topology hints and zones, mirroring of
user-written Endpoints into slices, dual-stack.
"""

from __future__ import annotations

import logging
from typing import Any, Hashable

from .controller import Controller, owner_reference
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Change, Obj
from .workloads import is_ready

log = logging.getLogger("gpu_reclaim_sim.controllers.endpoints")

POD, SVC = BY_KIND["Pod"], BY_KIND["Service"]
EP, SLICE = BY_KIND["Endpoints"], BY_KIND["EndpointSlice"]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"
HEADLESS_LABEL = "service.kubernetes.io/headless"

Key = tuple[str, str]
PortKey = tuple[tuple[str, int, str, str], ...]  # (name, port, protocol, appProtocol) per resolved port


def find_port(pod: Obj, service_port: Obj) -> int | None:
    """podutil.FindPort: a number as is; a name among the containers' ports."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    protocol = service_port.get("protocol", "TCP")
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target and p.get("protocol", "TCP") == protocol:
                return p.get("containerPort")
    return None


def selector_of(svc: Obj) -> dict[str, str] | None:
    """The pods' selector, or None when the controllers leave the Service alone."""
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName" or not spec.get("selector"):
        return None
    return dict(spec["selector"])


def _matches(selector: dict[str, str], pod: Obj | None) -> bool:
    if pod is None:
        return False
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class EndpointsController(Controller):
    """The endpoint and endpointslice controllers in one: both follow the same pods."""

    name = "endpoint-controller"

    def __init__(self, cluster: Any, gc: Any) -> None:
        super().__init__(cluster)
        self.gc = gc
        self._selectors: dict[str, dict[str, dict[str, str]]] = {}  # namespace -> service -> selector
        self.watch(SVC, self._on_service)
        self.watch(POD, self._on_pod)

    def initial_keys(self) -> list[Hashable]:
        keys: list[Hashable] = []
        for svc in self.store.objects(SVC):
            self._remember(svc, deleted=False)
            keys.append((svc["metadata"]["namespace"], svc["metadata"]["name"]))
        return keys

    def _remember(self, svc: Obj, deleted: bool) -> None:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        selector = None if deleted else selector_of(svc)
        services = self._selectors.setdefault(ns, {})
        if selector is None:
            services.pop(name, None)
        else:
            services[name] = selector

    def _on_service(self, change: Change) -> None:
        self._remember(change.new, change.type == "DELETED")
        self.enqueue((change.new["metadata"]["namespace"], change.new["metadata"]["name"]))

    def _on_pod(self, change: Change) -> None:
        ns = change.new["metadata"].get("namespace") or ""
        for name, selector in self._selectors.get(ns, {}).items():
            if _matches(selector, change.old) or _matches(selector, change.new):
                self.enqueue((ns, name))

    # --- sync --------------------------------------------------------------------------

    def reconcile(self, key: Key) -> None:
        ns, name = key
        svc = self.store.find(SVC, ns, name)
        if svc is None or svc["metadata"].get("deletionTimestamp"):
            if svc is None and self.store.find(EP, ns, name) is not None:
                self._ignore_gone(lambda: self.store.delete(EP, ns, name))
            return  # the slices go with the Service (they are owned by it)
        selector = selector_of(svc)
        if selector is None:
            return
        pods = [p for p in self.store.objects(POD)
                if p["metadata"].get("namespace") == ns and _matches(selector, p)]
        self._sync_endpoints(svc, pods)
        self._sync_slices(svc, pods)

    @staticmethod
    def _ignore_gone(fn: Any) -> None:
        try:
            fn()
        except ApiError as e:
            if e.code != 404:
                raise

    def _ports(self, svc: Obj, pod: Obj) -> PortKey:
        out = []
        for sp in (svc.get("spec") or {}).get("ports") or []:
            number = find_port(pod, sp)
            if number is not None:
                out.append((sp.get("name") or "", number, sp.get("protocol", "TCP"), sp.get("appProtocol") or ""))
        return tuple(out)

    def _labels(self, svc: Obj) -> dict[str, str]:
        labels = dict(svc["metadata"].get("labels") or {})
        if (svc.get("spec") or {}).get("clusterIP") == "None":
            labels[HEADLESS_LABEL] = ""
        return labels

    @staticmethod
    def _target(pod: Obj) -> dict[str, Any]:
        meta = pod["metadata"]
        return {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}

    @staticmethod
    def _hostname(svc: Obj, pod: Obj) -> str | None:
        spec = pod.get("spec") or {}
        if spec.get("hostname") and spec.get("subdomain") == svc["metadata"]["name"]:
            return spec["hostname"]
        return None

    def _usable(self, svc: Obj, pod: Obj) -> tuple[PortKey, str] | None:
        """The pod's resolved ports and IP, or None when it is no endpoint at all."""
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        ports = self._ports(svc, pod)
        if (svc.get("spec") or {}).get("ports") and not ports:
            return None
        return ports, ip

    def _sync_endpoints(self, svc: Obj, pods: list[Obj]) -> None:
        publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
        subsets: dict[PortKey, dict[str, list[Obj]]] = {}
        for pod in pods:
            usable = self._usable(svc, pod)
            if usable is None or (pod["metadata"].get("deletionTimestamp") and not publish):
                continue
            ports, ip = usable
            address: dict[str, Any] = {"ip": ip}
            if self._hostname(svc, pod):
                address["hostname"] = self._hostname(svc, pod)
            if (pod.get("spec") or {}).get("nodeName"):
                address["nodeName"] = pod["spec"]["nodeName"]
            address["targetRef"] = self._target(pod)
            kind = "addresses" if publish or is_ready(pod) else "notReadyAddresses"
            subsets.setdefault(ports, {}).setdefault(kind, []).append(address)
        out = []
        for ports, groups in sorted(subsets.items()):
            subset: dict[str, Any] = {}
            for kind in ("addresses", "notReadyAddresses"):
                if groups.get(kind):
                    subset[kind] = sorted(groups[kind], key=lambda a: (a["ip"], a["targetRef"]["uid"]))
            if ports:
                subset["ports"] = [_port(p) for p in sorted(ports)]
            out.append(subset)
        meta = svc["metadata"]
        labels = {**self._labels(svc), SKIP_MIRROR_LABEL: "true"}
        current = self.store.find(EP, meta["namespace"], meta["name"])
        body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}}
        if out:
            body["subsets"] = out
        if current is None:
            self.cluster.create(EP, body, meta["namespace"])
        elif current.get("subsets") != body.get("subsets") or current["metadata"].get("labels") != labels:
            def update(o: Obj) -> None:
                o["metadata"]["labels"] = labels
                o.pop("subsets", None)
                o.update({"subsets": out} if out else {})

            self.store.update(EP, meta["namespace"], meta["name"], update)

    def _sync_slices(self, svc: Obj, pods: list[Obj]) -> None:
        publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
        groups: dict[PortKey, list[Obj]] = {}
        for pod in pods:
            usable = self._usable(svc, pod)
            if usable is None:
                continue
            ports, ip = usable
            terminating = bool(pod["metadata"].get("deletionTimestamp"))
            serving = publish or is_ready(pod)
            endpoint: dict[str, Any] = {
                "addresses": [ip],
                "conditions": {"ready": serving and not terminating, "serving": serving, "terminating": terminating},
            }
            if self._hostname(svc, pod):
                endpoint["hostname"] = self._hostname(svc, pod)
            if (pod.get("spec") or {}).get("nodeName"):
                endpoint["nodeName"] = pod["spec"]["nodeName"]
            endpoint["targetRef"] = self._target(pod)
            groups.setdefault(ports, []).append(endpoint)
        if not groups:
            groups[()] = []  # the placeholder slice
        meta = svc["metadata"]
        labels = {**self._labels(svc), SERVICE_NAME_LABEL: meta["name"], MANAGED_BY_LABEL: MANAGED_BY}
        existing = [s for s in self.gc.dependents(svc, SLICE)
                    if (s["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY]
        by_ports = {tuple(_port_key(p) for p in s.get("ports") or []): s for s in existing}
        for ports, endpoints in groups.items():
            endpoints = sorted(endpoints, key=lambda e: (e["addresses"][0], e["targetRef"]["uid"]))
            wanted_ports = [_port(p, slice_=True) for p in sorted(ports)]
            current = by_ports.pop(ports, None)
            if current is None:
                self.cluster.create(SLICE, {
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"],
                                 "labels": labels, "ownerReferences": [owner_reference(svc)]},
                    "addressType": "IPv4", "endpoints": endpoints, "ports": wanted_ports,
                }, meta["namespace"])
            elif current.get("endpoints") != endpoints or current["metadata"].get("labels") != labels:
                def update(o: Obj, endpoints: list[Obj] = endpoints) -> None:
                    o["endpoints"] = endpoints
                    o["metadata"]["labels"] = labels

                self.store.update(SLICE, meta["namespace"], current["metadata"]["name"], update)
        for stale in by_ports.values():
            self._ignore_gone(lambda stale=stale: self.store.delete(SLICE, meta["namespace"], stale["metadata"]["name"]))


def _port(p: tuple[str, int, str, str], slice_: bool = False) -> dict[str, Any]:
    name, number, protocol, app = p
    out: dict[str, Any] = {"name": name} if name or slice_ else {}
    out.update({"port": number, "protocol": protocol})
    if app:
        out["appProtocol"] = app
    return out


def _port_key(p: Obj) -> tuple[str, int | None, str, str]:
    """The key of a stored slice's port (whose `port` may be absent, meaning all ports)."""
    return (p.get("name") or "", p.get("port"), p.get("protocol", "TCP"), p.get("appProtocol") or "")

