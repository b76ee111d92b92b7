"""The `kubernetes` Service in `default`: how pods reach the API server.

As kube-apiserver's own controller keeps it: the first address of the service network
(`10.96.0.1` on a default cluster), port `https` 443, no selector, and the Endpoints and
EndpointSlice `kubernetes` that name the API server's secure port (what the service
proxy forwards to). The kubelet's service variables (`KUBERNETES_SERVICE_HOST`/`_PORT`,
sim.kubelet.names) and the pods' hosts files (`kubernetes.default.svc`) come from it as from any
Service, so in-cluster configuration finds the API server as it would on a real cluster.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable

from ..controllers.endpoints import MANAGED_BY_LABEL, SERVICE_NAME_LABEL, SKIP_MIRROR_LABEL
from ..resources import BY_KIND
from ..store import Obj, Store

NAMESPACE, NAME, PORT_NAME, PORT = "default", "kubernetes", "https", 443
SVC, EP, SLICE = BY_KIND["Service"], BY_KIND["Endpoints"], BY_KIND["EndpointSlice"]
_LABELS = {"component": "apiserver", "provider": "kubernetes"}


def cluster_ip(service_cidr: ipaddress.IPv4Network) -> str:
    """The Service's address: the service network's first (the allocators never give it out)."""
    return str(service_cidr.network_address + 1)


def ensure(store: Store, create: Callable[..., Obj], host: str, port: int) -> None:
    """Create or correct the Service, its Endpoints and EndpointSlice for an API server
    listening (HTTPS) on `host:port`."""
    if store.find(SVC, NAMESPACE, NAME) is None:
        create(SVC, {"metadata": {"name": NAME, "labels": _LABELS}, "spec": {
            "type": "ClusterIP", "clusterIP": cluster_ip(store.service_cidr), "sessionAffinity": "None",
            "ports": [{"name": PORT_NAME, "port": PORT, "protocol": "TCP", "targetPort": port}]}}, NAMESPACE)
    subsets = [{"addresses": [{"ip": host}], "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]}]
    _put(store, create, EP, {"metadata": {"name": NAME, "labels": {SKIP_MIRROR_LABEL: "true"}}, "subsets": subsets})
    _put(store, create, SLICE, {
        "metadata": {"name": NAME, "labels": {SERVICE_NAME_LABEL: NAME, MANAGED_BY_LABEL: "kube-apiserver"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
        "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]})


def _put(store: Store, create: Callable[..., Obj], rtype: Any, body: Obj) -> None:
    current = store.find(rtype, NAMESPACE, NAME)
    if current is None:
        create(rtype, body, NAMESPACE)
        return
    fields = [k for k in body if k != "metadata"]
    if any(current.get(k) != body[k] for k in fields):
        store.update(rtype, NAMESPACE, NAME, lambda o: o.update({k: body[k] for k in fields}))
