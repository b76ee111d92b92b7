"""Decoding the Kubernetes protobuf request bodies kubectl's typed clients send.

kubectl's imperative `create namespace|configmap|secret|serviceaccount|service|priorityclass|
role|clusterrole|rolebinding|clusterrolebinding|token` and `auth can-i|whoami` POST protobuf (`application/vnd.kubernetes.protobuf`) and, unlike for CBOR, client-go
does not fall back to JSON when refused. This decodes those few kinds (field numbers from
k8s.io/api's generated.proto files) into the JSON form the rest of the server handles.
Responses are always JSON, which every client accepts. Other kinds are refused with 415.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from ..errors import ApiError

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# field number -> (json name, type); a type is a scalar name or a nested table
Table = dict[int, tuple[str, Any]]
_TIME: Table = {1: ("seconds", "int"), 2: ("nanos", "int")}
_OWNER: Table = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"), 5: ("apiVersion", "string"),
                 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
_META: Table = {
    1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"), 5: ("uid", "string"),
    6: ("resourceVersion", "string"), 7: ("generation", "int"), 8: ("creationTimestamp", "time"),
    11: ("labels", "map_string"), 12: ("annotations", "map_string"), 13: ("ownerReferences", ("repeated", _OWNER)),
    14: ("finalizers", "repeated_string"),
}
_REF: Table = {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"), 4: ("uid", "string"),
               5: ("apiVersion", "string")}
_LOCAL_REF: Table = {1: ("name", "string")}
_INT_OR_STRING: Table = {2: ("intVal", "int"), 3: ("strVal", "string")}
_SERVICE_PORT: Table = {1: ("name", "string"), 2: ("protocol", "string"), 3: ("port", "int"),
                        4: ("targetPort", "intorstring"), 5: ("nodePort", "int"), 6: ("appProtocol", "string")}
_SERVICE_SPEC: Table = {1: ("ports", ("repeated", _SERVICE_PORT)), 2: ("selector", "map_string"),
                        3: ("clusterIP", "string"), 4: ("type", "string"), 5: ("externalIPs", "repeated_string"),
                        7: ("sessionAffinity", "string"), 10: ("externalName", "string")}
KINDS: dict[str, Table] = {
    "Service": {1: ("metadata", _META), 2: ("spec", _SERVICE_SPEC)},
    "PriorityClass": {1: ("metadata", _META), 2: ("value", "int"), 3: ("globalDefault", "bool"),
                      4: ("description", "string"), 5: ("preemptionPolicy", "string")},
    "Namespace": {1: ("metadata", _META), 2: ("spec", {1: ("finalizers", "repeated_string")})},
    "ConfigMap": {1: ("metadata", _META), 2: ("data", "map_string"), 3: ("binaryData", "map_bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", _META), 2: ("data", "map_bytes"), 3: ("type", "string"),
               4: ("stringData", "map_string"), 5: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", _META), 2: ("secrets", ("repeated", _REF)),
                       3: ("imagePullSecrets", ("repeated", _LOCAL_REF)),
                       4: ("automountServiceAccountToken", "bool")},
}
# rbac.authorization.k8s.io/v1, authentication.k8s.io/v1 and authorization.k8s.io/v1
# (kubectl create role|rolebinding|token, kubectl auth can-i|whoami)
_SELECTOR_REQUIREMENT: Table = {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", "repeated_string")}
_LABEL_SELECTOR: Table = {1: ("matchLabels", "map_string"), 2: ("matchExpressions", ("repeated", _SELECTOR_REQUIREMENT))}
_POLICY_RULE: Table = {1: ("verbs", "repeated_string"), 2: ("apiGroups", "repeated_string"),
                       3: ("resources", "repeated_string"), 4: ("resourceNames", "repeated_string"),
                       5: ("nonResourceURLs", "repeated_string")}
_SUBJECT: Table = {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"), 4: ("namespace", "string")}
_ROLE_REF: Table = {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}
_BINDING: Table = {1: ("metadata", _META), 2: ("subjects", ("repeated", _SUBJECT)), 3: ("roleRef", _ROLE_REF)}
_RESOURCE_ATTRIBUTES: Table = {1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
                               4: ("version", "string"), 5: ("resource", "string"), 6: ("subresource", "string"),
                               7: ("name", "string")}
_ACCESS_REVIEW_SPEC: Table = {1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                              2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")})}
KINDS.update({
    "Role": {1: ("metadata", _META), 2: ("rules", ("repeated", _POLICY_RULE))},
    "ClusterRole": {1: ("metadata", _META), 2: ("rules", ("repeated", _POLICY_RULE)),
                    3: ("aggregationRule", {1: ("clusterRoleSelectors", ("repeated", _LABEL_SELECTOR))})},
    "RoleBinding": _BINDING,
    "ClusterRoleBinding": _BINDING,
    "TokenRequest": {1: ("metadata", _META), 2: ("spec", {
        1: ("audiences", "repeated_string"), 4: ("expirationSeconds", "int"),
        3: ("boundObjectRef", {1: ("kind", "string"), 2: ("apiVersion", "string"), 3: ("name", "string"),
                               4: ("uid", "string")})})},
    "SelfSubjectAccessReview": {1: ("metadata", _META), 2: ("spec", _ACCESS_REVIEW_SPEC)},
    "SelfSubjectRulesReview": {1: ("metadata", _META), 2: ("spec", {1: ("namespace", "string")})},
    "SelfSubjectReview": {1: ("metadata", _META)},
})
_UNKNOWN: Table = {1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}), 2: ("raw", "raw")}


def decode(body: bytes) -> dict[str, Any]:
    """The object in a protobuf request body, as JSON-shaped data."""
    if not body.startswith(MAGIC):
        raise _refused("the protobuf body lacks the k8s envelope")
    try:
        envelope = _message(memoryview(body)[len(MAGIC):], _UNKNOWN)
        type_meta = envelope.get("typeMeta") or {}
        kind = type_meta.get("kind", "")
        if kind not in KINDS:
            raise _refused(f"protobuf bodies are only understood for {', '.join(sorted(KINDS))}; "
                           "use JSON (e.g. kubectl create -f) for a " + (kind or "object"))
        obj = _message(memoryview(envelope.get("raw") or b""), KINDS[kind])
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"error decoding protobuf request body: {e}") from None
    return {"apiVersion": type_meta.get("apiVersion", "v1"), "kind": kind, **obj}


def _refused(why: str) -> ApiError:
    return ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                         f"application/json, application/yaml ({why})")


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(buf: memoryview) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; length-delimited values as memoryviews."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | memoryview | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _message(buf: memoryview, table: Table) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, _wire, value in _fields(buf):
        if number not in table:
            continue  # a field this simulator does not need
        name, kind = table[number]
        if isinstance(kind, dict):
            obj[name] = _message(value, kind)
        elif isinstance(kind, tuple):  # ("repeated", table)
            obj.setdefault(name, []).append(_message(value, kind[1]))
        elif kind == "repeated_string":
            obj.setdefault(name, []).append(bytes(value).decode())
        elif kind in ("map_string", "map_bytes"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = bytes(entry.get(1, b"")).decode()
            raw = bytes(entry.get(2, b""))
            obj.setdefault(name, {})[key] = raw.decode() if kind == "map_string" else base64.b64encode(raw).decode()
        elif kind == "time":
            parts = _message(value, _TIME)
            if not parts.get("seconds"):
                continue  # the zero time: unset
            stamp = dt.datetime.fromtimestamp(parts.get("seconds", 0), dt.timezone.utc)
            obj[name] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        elif kind == "intorstring":
            parts = _message(value, _INT_OR_STRING)
            if "strVal" in parts or "intVal" in parts:
                obj[name] = parts.get("strVal", parts.get("intVal"))
        # Go's protobuf always writes scalars; a zero value there means "unset" in JSON
        elif kind == "string" and len(value):
            obj[name] = bytes(value).decode()
        elif kind == "raw":
            obj[name] = bytes(value)
        elif kind == "bool" and value:
            obj[name] = True
        elif kind == "int" and value:
            obj[name] = value - (1 << 64) if value >= 1 << 63 else value
    return obj
