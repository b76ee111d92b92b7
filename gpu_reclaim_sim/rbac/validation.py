"""What admission checks of RBAC objects: policy rules, bindings and their subjects, and
what a binding update may change."""

from __future__ import annotations

import json
from typing import Any

from ..resources import RBAC_GROUP
from ..store import Obj


def validate_rules(rules: Any, namespaced: bool) -> list[dict[str, str]]:
    """validatePolicyRule for each rule of a Role (namespaced) or ClusterRole."""
    causes = []
    for i, rule in enumerate(rules or []):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            continue
        if not rule.get("verbs"):
            causes.append(_cause(f"{path}.verbs", "FieldValueRequired",
                                 "Required value: verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            shown = "[]string{" + ", ".join(json.dumps(u) for u in urls) + "}"
            if namespaced:
                causes.append(_cause(f"{path}.nonResourceURLs", "FieldValueInvalid",
                                     f"Invalid value: {shown}: namespaced rules cannot apply to non-resource URLs"))
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(_cause(f"{path}.nonResourceURLs", "FieldValueInvalid",
                                     f"Invalid value: {shown}: rules cannot apply to both regular resources and "
                                     "non-resource URLs"))
            continue
        if not rule.get("apiGroups"):
            causes.append(_cause(f"{path}.apiGroups", "FieldValueRequired",
                                 "Required value: resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append(_cause(f"{path}.resources", "FieldValueRequired",
                                 "Required value: resource rules must supply at least one resource"))
        if rule.get("resourceNames") and len(rule.get("resources") or []) > 1:
            causes.append(_cause(f"{path}.resourceNames", "FieldValueRequired",
                                 "Required value: resource names cannot apply to multiple resources"))
    return causes


def default_binding(binding: Obj) -> None:
    """SetDefaults for RoleBinding/ClusterRoleBinding: the roleRef's and subjects' apiGroup."""
    ref = binding.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    for s in binding.get("subjects") or []:
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = RBAC_GROUP


def validate_binding(binding: Obj, namespaced: bool) -> list[dict[str, str]]:
    """ValidateRoleBinding / ValidateClusterRoleBinding (names are checked with the metadata)."""
    causes = []
    ref = binding.get("roleRef") or {}
    if ref.get("apiGroup") != RBAC_GROUP:
        causes.append(_cause("roleRef.apiGroup", "FieldValueNotSupported",
                             f'Unsupported value: {json.dumps(ref.get("apiGroup") or "")}: supported values: '
                             f'"{RBAC_GROUP}"'))
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        causes.append(_cause("roleRef.kind", "FieldValueNotSupported",
                             f'Unsupported value: {json.dumps(ref.get("kind") or "")}: supported values: '
                             + ", ".join(f'"{k}"' for k in kinds)))
    if not ref.get("name"):
        causes.append(_cause("roleRef.name", "FieldValueRequired", "Required value"))
    else:
        causes += [_cause("roleRef.name", "FieldValueInvalid", f"Invalid value: {json.dumps(ref['name'])}: {m}")
                   for m in path_segment_problems(ref["name"])]
    for i, s in enumerate(binding.get("subjects") or []):
        path = f"subjects[{i}]"
        if not isinstance(s, dict):
            continue
        if not s.get("name"):
            causes.append(_cause(f"{path}.name", "FieldValueRequired", "Required value"))
        kind = s.get("kind")
        if kind == "ServiceAccount":
            if s.get("apiGroup"):
                causes.append(_cause(f"{path}.apiGroup", "FieldValueNotSupported",
                                     f'Unsupported value: {json.dumps(s["apiGroup"])}: supported values: ""'))
            if not namespaced and not s.get("namespace"):
                causes.append(_cause(f"{path}.namespace", "FieldValueRequired", "Required value"))
        elif kind in ("User", "Group"):
            if s.get("apiGroup") != RBAC_GROUP:
                causes.append(_cause(f"{path}.apiGroup", "FieldValueNotSupported",
                                     f'Unsupported value: {json.dumps(s.get("apiGroup") or "")}: supported values: '
                                     f'"{RBAC_GROUP}"'))
        else:
            causes.append(_cause(f"{path}.kind", "FieldValueNotSupported",
                                 f'Unsupported value: {json.dumps(kind or "")}: supported values: '
                                 '"ServiceAccount", "User", "Group"'))
    return causes


def validate_binding_update(old: Obj, new: Obj) -> list[dict[str, str]]:
    if old.get("roleRef") != new.get("roleRef"):
        ref = new.get("roleRef") or {}
        shown = (f'rbac.RoleRef{{APIGroup:{json.dumps(ref.get("apiGroup", ""))}, '
                 f'Kind:{json.dumps(ref.get("kind", ""))}, Name:{json.dumps(ref.get("name", ""))}}}')
        return [_cause("roleRef", "FieldValueInvalid", f"Invalid value: {shown}: cannot change roleRef")]
    return []


def path_segment_problems(name: str) -> list[str]:
    """path.IsValidPathSegmentName: the only rule for RBAC object names."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _cause(field: str, reason: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}
