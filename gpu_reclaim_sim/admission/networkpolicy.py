"""NetworkPolicies as the API server admits them: defaulting (SetDefaults_NetworkPolicy)
and validation (ValidateNetworkPolicySpec), in its words. What a policy allows is
sim.network.netpol's."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Mapping

from ..store import Obj, Store
from .validation import _cause


def default(store: Store, np: Obj, old: Obj | None = None) -> None:
    """SetDefaults_NetworkPolicy: policyTypes from the rules given; ports TCP."""
    spec = np.setdefault("spec", {})
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            for p in (rule.get("ports") or []) if isinstance(rule, dict) else []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")


# --- validation (ValidateNetworkPolicySpec) -----------------------------------------------

_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
PROTOCOLS = ("TCP", "UDP", "SCTP")


def validate(policy: Mapping[str, Any]) -> list[dict[str, str]]:
    """The causes the API server's validation gives a NetworkPolicy (in its words)."""
    spec = policy.get("spec") or {}
    causes = _selector_causes(spec.get("podSelector") or {}, "spec.podSelector")
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            path = f"spec.{direction}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                causes += _port_causes(port, f"{path}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers_key) or []):
                causes += _peer_causes(peer, f"{path}.{peers_key}[{j}]")
    types = spec.get("policyTypes") or []
    if len(types) > 2:
        causes.append(_cause("spec.policyTypes", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(types)}: may not specify more than two policyTypes"))
    else:
        for i, t in enumerate(types):
            if t not in ("Ingress", "Egress"):
                causes.append(_cause(f"spec.policyTypes[{i}]", "FieldValueNotSupported",
                                     f'Unsupported value: {json.dumps(t)}: supported values: "Ingress", "Egress"'))
    return causes


def _invalid(path: str, value: Any, message: str) -> dict[str, str]:
    return _cause(path, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {message}")


def _port_causes(port: Mapping[str, Any], path: str) -> list[dict[str, str]]:
    causes = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        causes.append(_cause(f"{path}.protocol", "FieldValueNotSupported",
                             f"Unsupported value: {json.dumps(protocol)}: supported values: "
                             + ", ".join(f'"{p}"' for p in PROTOCOLS)))
    number, end = port.get("port"), port.get("endPort")
    if number is None:
        if end is not None:
            causes.append(_invalid(f"{path}.endPort", end, "may not be specified when `port` is not specified"))
    elif isinstance(number, int):
        if not 1 <= number <= 65535:
            causes.append(_invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive"))
        if end is not None:
            if end < number:
                causes.append(_invalid(f"{path}.endPort", end, "must be greater than or equal to `port`"))
            if not 1 <= end <= 65535:
                causes.append(_invalid(f"{path}.endPort", end, "must be between 1 and 65535, inclusive"))
    else:
        if end is not None:
            causes.append(_invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric"))
        for message in _port_name_errors(str(number)):
            causes.append(_invalid(f"{path}.port", number, message))
    return causes


def _port_name_errors(name: str) -> list[str]:
    """validation.IsValidPortName"""
    errors = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARS.match(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search(r"[a-z]", name):
        errors.append("must contain at least one letter (a-z)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def _peer_causes(peer: Mapping[str, Any], path: str) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    count = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            count += 1
            causes += _selector_causes(peer[key], f"{path}.{key}")
    if peer.get("ipBlock") is not None:
        count += 1
        causes += _ip_block_causes(peer["ipBlock"], f"{path}.ipBlock")
    if count == 0:
        causes.append(_cause(path, "FieldValueRequired", "Required value: must specify a peer"))
    elif count > 1 and peer.get("ipBlock") is not None:
        causes.append(_cause(path, "FieldValueForbidden", "Forbidden: may not specify both ipBlock and another peer"))
    return causes


def _selector_causes(selector: Mapping[str, Any], path: str) -> list[dict[str, str]]:
    """ValidateLabelSelector: each expression's operator and values."""
    causes = []
    for i, e in enumerate(selector.get("matchExpressions") or []):
        op, values = e.get("operator"), e.get("values") or []
        if op in ("In", "NotIn") and not values:
            causes.append(_cause(f"{path}.matchExpressions[{i}].values", "FieldValueRequired",
                                 "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            causes.append(_cause(f"{path}.matchExpressions[{i}].values", "FieldValueForbidden",
                                 "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif op not in _SELECTOR_OPS:
            causes.append(_invalid(f"{path}.matchExpressions[{i}].operator", op, "not a valid selector operator"))
    return causes


def _ip_block_causes(ipb: Mapping[str, Any], path: str) -> list[dict[str, str]]:
    if not ipb.get("cidr"):
        return [_cause(f"{path}.cidr", "FieldValueRequired", "Required value")]
    causes = _cidr_causes(ipb["cidr"], f"{path}.cidr")
    if causes:
        return causes
    cidr = ipaddress.ip_network(ipb["cidr"], strict=False)
    for i, text in enumerate(ipb.get("except") or []):
        found = _cidr_causes(text, f"{path}.except[{i}]")
        causes += found
        if found:
            continue
        if not _strict_subnet(ipaddress.ip_network(text, strict=False), cidr):
            causes.append(_invalid(f"{path}.except[{i}]", text, "must be a strict subset of `cidr`"))
    return causes


def _strict_subnet(inner: ipaddress.IPv4Network | ipaddress.IPv6Network,
                   outer: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """`inner` lies inside `outer` and is smaller (networks of two IP versions never nest)."""
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        nested = inner.subnet_of(outer)
    elif isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        nested = inner.subnet_of(outer)
    else:
        return False
    return nested and inner.prefixlen > outer.prefixlen


def _cidr_causes(text: str, path: str) -> list[dict[str, str]]:
    """IsValidCIDRForLegacyField (without the StrictIPCIDRValidation gate, alpha): any
    parseable CIDR, also one with host bits set."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return [_invalid(path, text, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]
    return []
