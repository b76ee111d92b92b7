"""Services (and Endpoints' ports): defaulting, the ClusterIP / NodePort / LoadBalancer
allocators, validation."""

from __future__ import annotations

import copy
import ipaddress
import json
import random
from typing import Any

from .. import errors
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Obj, Store
from .validation import Cause, _cause

NODE_PORTS = range(30000, 32768)


def _default_service(store: Store, svc: Obj, old: Obj | None = None) -> None:
    spec = svc.setdefault("spec", {})
    if old is not None:  # a client that omits allocated values keeps them
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key not in spec and key in (old.get("spec") or {}):
                spec[key] = copy.deepcopy(old["spec"][key])
        old_ports = {p.get("port"): p for p in (old.get("spec") or {}).get("ports") or []}
        for p in spec.get("ports") or []:
            if "nodePort" not in p and "nodePort" in old_ports.get(p.get("port"), {}):
                p["nodePort"] = old_ports[p.get("port")]["nodePort"]
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")


def _admit_service(store: Store, svc: Obj) -> None:
    """The Service IP and node-port allocators."""
    spec = svc["spec"]
    if spec["type"] != "ExternalName":
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if ip != "None":
            used = used_service_ips(store)
            if ip:
                _check_cluster_ip(ip, used, store)
            else:
                ip = allocate_ip(store.service_cidr, used, exclude=load_balancer_range(store))
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        used_ports = {p.get("nodePort") for s in store.objects(BY_KIND["Service"])
                      for p in (s.get("spec") or {}).get("ports") or []}
        free = [p for p in NODE_PORTS if p not in used_ports]
        for p in spec.get("ports") or []:
            if "nodePort" not in p and free:
                p["nodePort"] = free.pop(random.randrange(len(free)))
    svc["status"] = {"loadBalancer": {}}


def used_service_ips(store: Store) -> set[str]:
    """Cluster IPs and load-balancer IPs in use (both come from the service network)."""
    used: set[str] = set()
    for s in store.objects(BY_KIND["Service"]):
        used.update((s.get("spec") or {}).get("clusterIPs") or [])
        used.update(i.get("ip") for i in ((s.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [])
    return used


def load_balancer_range(store: Store) -> ipaddress.IPv4Network:
    """The service network's last /24: load-balancer addresses, as a
    MetalLB pool carved from it (sim.network.loadbalancers); cluster IPs come from the rest."""
    return ipaddress.IPv4Network(f"{store.service_cidr.broadcast_address - 255}/24")


def _check_cluster_ip(ip: str, used: set[str], store: Store) -> None:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise _invalid_ip(ip, "must be a valid IP address") from None
    cidr = store.service_cidr
    if addr not in cidr or addr in load_balancer_range(store):
        raise _invalid_ip(ip, f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. "
                              f"The range of valid IPs is {cidr}")
    if ip in used:
        raise _invalid_ip(ip, f"failed to allocate IP {ip}: provided IP is already allocated")


def _invalid_ip(ip: str, message: str) -> ApiError:
    return errors.invalid("Service", "", [_cause("spec.clusterIPs", "FieldValueInvalid",
                                                  f'Invalid value: []string{{"{ip}"}}: {message}')])


def allocate_ip(cidr: Any, used: set[str], exclude: Any = None) -> str:
    """A free address of `cidr` (not in `exclude`) at random, like the real allocator (the
    first ten are left out: .1 is the `kubernetes` Service's on a real cluster)."""
    size = cidr.num_addresses
    for _ in range(1000):
        addr = cidr.network_address + random.randrange(min(10, size - 2), size - 1)
        if str(addr) not in used and (exclude is None or addr not in exclude):
            return str(addr)
    raise ApiError(500, "Internal error occurred: failed to allocate a serviceIP: range is full")


def _validate_service(store: Store, svc: Obj) -> list[Cause]:
    spec = svc.get("spec") or {}
    causes: list[Cause] = []
    types = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
    if spec.get("type") not in types:
        causes.append(_cause("spec.type", "FieldValueNotSupported",
                             f"Unsupported value: {json.dumps(spec.get('type'))}: supported values: "
                             + ", ".join(f'"{t}"' for t in types)))
    if not spec.get("ports") and spec.get("clusterIP") != "None" and spec.get("type") != "ExternalName":
        causes.append(_cause("spec.ports", "FieldValueRequired", "Required value"))
    for i, p in enumerate(spec.get("ports") or []):
        if not isinstance(p.get("port"), int) or not 1 <= p["port"] <= 65535:
            causes.append(_cause(f"spec.ports[{i}].port", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(p.get('port'))}: must be between 1 and 65535, inclusive"))
        if len(spec["ports"]) > 1 and not p.get("name"):
            causes.append(_cause(f"spec.ports[{i}].name", "FieldValueRequired", "Required value"))
    return causes


def _validate_service_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    oip, nip = (old.get("spec") or {}).get("clusterIP"), (new.get("spec") or {}).get("clusterIP")
    if oip and nip != oip and (old.get("spec") or {}).get("type") != "ExternalName":
        return [_cause("spec.clusterIPs[0]", "FieldValueInvalid",
                       f"Invalid value: []string{{{json.dumps(nip)}}}: may not change once set")]
    return []


def _default_ports(store: Store, obj: Obj, old: Obj | None = None) -> None:
    """Endpoints subsets' and EndpointSlices' ports default to TCP."""
    holders = obj.get("subsets") or [] if obj["kind"] == "Endpoints" else [obj]
    for holder in holders:
        for p in (holder.get("ports") or []) if isinstance(holder, dict) else []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")


# what the pipeline does for these kinds: defaulting, admission plugins, validation
DEFAULTERS = {"Endpoints": _default_ports, "EndpointSlice": _default_ports, "Service": _default_service}
CREATE_PLUGINS = {"Service": _admit_service}
VALIDATORS = {"Service": _validate_service}
UPDATE_VALIDATORS = {"Service": _validate_service_update}
