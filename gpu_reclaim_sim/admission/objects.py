"""The smaller kinds: Namespaces, Secrets and ConfigMaps, NetworkPolicies, Roles and
RoleBindings: defaulting, admission and validation."""

from __future__ import annotations

import base64
import binascii
import json
import re

from .. import errors
from ..rbac.validation import default_binding, validate_binding, validate_binding_update, validate_rules
from ..store import Obj, Store
from . import networkpolicy
from .validation import Cause, _cause

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _admit_namespace(store: Store, ns: Obj) -> None:
    name = ns["metadata"].get("name", "")
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}


def _default_namespace(store: Store, ns: Obj, old: Obj | None = None) -> None:
    name = ns["metadata"].get("name", "")
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name


def _default_secret(store: Store, secret: Obj, old: Obj | None = None) -> None:
    """stringData is folded into data (base64), as the apiserver does; type Opaque."""
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    for key, value in (secret.get("data") or {}).items():
        try:
            base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise errors.bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0 '
                f"(data[{key}])") from None


def _validate_config_keys(store: Store, obj: Obj) -> list[Cause]:
    causes = []
    for field in ("data", "binaryData"):
        for key in (obj.get(field) or {}):
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                causes.append(_cause(f"{field}[{key}]", "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(key)}: a valid config key must consist of "
                                     "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                                     "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
    return causes


def _validate_immutable_data(store: Store, old: Obj, new: Obj) -> list[Cause]:
    if old.get("immutable") and any(old.get(k) != new.get(k) for k in ("data", "binaryData", "immutable")):
        return [_cause("data", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set")]
    return []


def _default_binding(store: Store, binding: Obj, old: Obj | None = None) -> None:
    default_binding(binding)


def _validate_role(store: Store, role: Obj) -> list[Cause]:
    return validate_rules(role.get("rules"), namespaced=role.get("kind") == "Role")


def _validate_binding(store: Store, binding: Obj) -> list[Cause]:
    return validate_binding(binding, namespaced=binding.get("kind") == "RoleBinding")


def _validate_binding_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    return validate_binding_update(old, new)


# what the pipeline does for these kinds: defaulting, admission plugins, validation
DEFAULTERS = {
    "NetworkPolicy": networkpolicy.default,
    "Namespace": _default_namespace,
    "Secret": _default_secret,
    "RoleBinding": _default_binding,
    "ClusterRoleBinding": _default_binding,
}
CREATE_PLUGINS = {"Namespace": _admit_namespace}
VALIDATORS = {
    "Secret": _validate_config_keys,
    "ConfigMap": _validate_config_keys,
    "NetworkPolicy": lambda store, np: networkpolicy.validate(np),
    "Role": _validate_role,
    "ClusterRole": _validate_role,
    "RoleBinding": _validate_binding,
    "ClusterRoleBinding": _validate_binding,
}
UPDATE_VALIDATORS = {
    "Secret": _validate_immutable_data,
    "ConfigMap": _validate_immutable_data,
    "RoleBinding": _validate_binding_update,
    "ClusterRoleBinding": _validate_binding_update,
}
