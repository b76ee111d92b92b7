"""What the apiserver does to an object between decoding it and storing it.

`admit_create` and `admit_update` return a prepared deep copy or raise `errors.ApiError`,
in the order the real server works: schema (type) validation, defaulting, mutating
admission plugins (Priority, DefaultTolerationSeconds, ServiceAccount (see
`serviceaccounts.admit_pod`), DefaultStorageClass and PVC protection, the Service IP
allocator), then the semantic validation the OpenAPI schema cannot express. Messages follow the apiserver's wording, e.g.
`Pod "x" is invalid: spec.containers[0].image: Required value`.

Simplifications (documented in docs/sim.md):
- unknown fields are pruned here (`decode` reports them, for `fieldValidation`)."""

from __future__ import annotations

import copy
from typing import Any

from .. import namespaces
from ..resources import ResourceType
from ..store import Obj, Store
from . import objects, pods, services, storage, workloads
from .schema import _prepare, _validate_schema
from .validation import Cause, _raise_invalid, _validate_meta


def admit_create(store: Store, rtype: ResourceType, obj: Obj, namespace: str | None = None, *,
                 schema_valid: bool = False) -> Obj:
    """Validate, default and admit a new object; returns the object to store.
    `schema_valid`: `decode` found it fits the schema (validating a pod costs milliseconds)."""
    obj = _prepare(rtype, obj)
    meta = obj.setdefault("metadata", {})
    if rtype.namespaced and namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    if rtype.namespaced and isinstance(meta.get("namespace") or "", str):  # NamespaceLifecycle comes first
        namespaces.check(store, rtype, meta.get("namespace") or "default", str(meta.get("name") or ""))
    if not schema_valid:
        _validate_schema(rtype, obj)
    if rtype.kind != "Node":  # status is the server's to set (kubelets register nodes with theirs)
        obj.pop("status", None)
    _DEFAULTERS.get(rtype.kind, _noop)(store, obj)
    _CREATE_PLUGINS.get(rtype.kind, _noop)(store, obj)
    causes = _validate_meta(rtype, meta, creating=True)
    causes += _VALIDATORS.get(rtype.kind, _no_causes)(store, obj)
    _raise_invalid(rtype, obj, causes)
    return obj


def admit_update(
    store: Store, rtype: ResourceType, old: Obj, new: Obj, subresource: str | None = None, *,
    schema_valid: bool = False,
) -> Obj:
    """Validate an update (PUT or a patch's result) against the stored `old` object.

    For `subresource="status"` only the status changes; for the main resource of a kind
    with a status subresource the status is kept, as the real registry strategies do."""
    new = _prepare(rtype, new)
    meta = new.setdefault("metadata", {})
    for key in ("name", "namespace"):
        if key in old["metadata"]:
            meta.setdefault(key, old["metadata"][key])
    if not schema_valid:
        _validate_schema(rtype, new)
    if subresource == "status":
        merged = copy.deepcopy(old)
        merged["status"] = new.get("status") or {}
        merged["metadata"]["resourceVersion"] = meta.get("resourceVersion") or old["metadata"].get(
            "resourceVersion")
        for key in ("labels", "annotations"):  # the status strategies let these through
            if key in meta:
                merged["metadata"][key] = meta[key]
        return merged
    if rtype.status_subresource or rtype.kind == "Namespace":
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    _DEFAULTERS.get(rtype.kind, _noop)(store, new, old)
    causes = _validate_meta(rtype, meta, creating=False)
    causes += _UPDATE_VALIDATORS.get(rtype.kind, _no_update_causes)(store, old, new)
    if not causes:
        causes += _VALIDATORS.get(rtype.kind, _no_causes)(store, new)
    _raise_invalid(rtype, new, causes)
    return new


def _noop(*args: Any) -> None:
    return None


def _no_causes(store: Store, obj: Obj) -> list[Cause]:
    return []


def _no_update_causes(store: Store, old: Obj, new: Obj) -> list[Cause]:
    return []


# what each kind gets, from the module of its kind
KINDS = (objects, pods, services, storage, workloads)
_DEFAULTERS = {kind: f for module in KINDS for kind, f in module.DEFAULTERS.items()}
_CREATE_PLUGINS = {kind: f for module in KINDS for kind, f in module.CREATE_PLUGINS.items()}
_VALIDATORS = {kind: f for module in KINDS for kind, f in module.VALIDATORS.items()}
_UPDATE_VALIDATORS = {kind: f for module in KINDS for kind, f in module.UPDATE_VALIDATORS.items()}
