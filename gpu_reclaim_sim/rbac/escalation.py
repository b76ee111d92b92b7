"""Escalation prevention: creating or updating a Role or ClusterRole needs every permission
it grants (or `escalate`); a binding needs the permissions of its role (or `bind`)."""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

from .. import errors
from .authn import MASTERS, UserInfo
from ..resources import BY_KIND, RBAC_GROUP
from ..store import Obj
from .authorizer import CLUSTER_ROLE, ROLE, Attributes, Authorizer


def confirm_no_escalation(authorizer: Authorizer, user: UserInfo, kind: str, obj: Obj,
                          old: Obj | None = None) -> None:
    """What the RBAC registry checks before storing a Role, ClusterRole or binding from
    `user` (raises the apiserver's 403)."""
    if MASTERS in user.groups or authorizer.mode == "AlwaysAllow":
        return
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    rtype = BY_KIND[kind]
    if kind in ("Role", "ClusterRole"):
        if old is not None and old.get("rules") == obj.get("rules") and \
                old.get("aggregationRule") == obj.get("aggregationRule"):
            return
        escalate = Attributes(user, "escalate", True, "", namespace, RBAC_GROUP, "*", rtype.plural, "", name)
        if authorizer.authorize(escalate)[0]:
            return
        if kind == "ClusterRole" and obj.get("aggregationRule"):
            raise errors.forbidden(rtype.plural, name, "must have cluster-admin privileges to use the "
                                   "aggregationRule", RBAC_GROUP)
        granted = [r for r in obj.get("rules") or [] if isinstance(r, dict)]
    else:
        ref = obj.get("roleRef") or {}
        if old is not None and (old.get("roleRef") == ref and old.get("subjects") == obj.get("subjects")):
            return
        ref_type = CLUSTER_ROLE if ref.get("kind") == "ClusterRole" else ROLE
        bind = Attributes(user, "bind", True, "", namespace, ref.get("apiGroup") or RBAC_GROUP, "",
                          ref_type.plural, "", ref.get("name") or "")
        if authorizer.authorize(bind)[0]:
            return
        role = authorizer.store.find(ref_type, namespace if ref_type is ROLE else None, ref.get("name") or "")
        if role is None:
            raise errors.not_found(ref_type.plural, ref.get("name") or "", RBAC_GROUP)
        granted = [r for r in role.get("rules") or [] if isinstance(r, dict)]
    held, resolution_errors = authorizer.rules_for(user, namespace)
    missing = _uncovered(held, granted)
    if not missing:
        return
    lines = sorted({_compact_string(r) for r in _compact(missing)})
    message = (f"user {_go_quote(user.name)} (groups={_go_quote_list(list(user.groups))}) is attempting to grant "
               f"RBAC permissions not currently held:\n" + "\n".join(lines))
    if resolution_errors:
        message += f"; resolution errors: [{' '.join(resolution_errors)}]"
    raise errors.forbidden(rtype.plural, name, message, RBAC_GROUP)


def _breakdown(rule: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    out = []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for name in rule.get("resourceNames") or [None]:
                for verb in rule.get("verbs") or []:
                    atom = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name is not None:
                        atom["resourceNames"] = [name]
                    out.append(atom)
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            out.append({"nonResourceURLs": [url], "verbs": [verb]})
    return out


def _covers(owner: Mapping[str, Any], sub: Mapping[str, Any]) -> bool:
    """validation.ruleCovers for one broken-down rule."""
    def has_all(have: Any, want: Any) -> bool:
        return set(want or ()) <= set(have or ())

    verbs, groups = owner.get("verbs") or [], owner.get("apiGroups") or []
    if not ("*" in verbs or has_all(verbs, sub.get("verbs"))):
        return False
    if not ("*" in groups or has_all(groups, sub.get("apiGroups"))):
        return False
    resources = owner.get("resources") or []
    if "*" not in resources:
        for r in sub.get("resources") or []:
            if r not in resources and not ("/" in r and "*/" + r.split("/", 1)[1] in resources):
                return False
    urls = owner.get("nonResourceURLs") or []
    if "*" not in urls:
        for u in sub.get("nonResourceURLs") or []:
            if not any(o == u or (o.endswith("*") and u.startswith(o.rstrip("*"))) for o in urls):
                return False
    names = owner.get("resourceNames") or []
    if not sub.get("resourceNames"):
        return not names
    return not names or has_all(names, sub["resourceNames"])


def _uncovered(owner_rules: list[Obj], granted: list[Obj]) -> list[dict[str, list[str]]]:
    return [atom for rule in granted for atom in _breakdown(rule)
            if not any(_covers(o, atom) for o in owner_rules)]


def _compact(rules: list[dict[str, list[str]]]) -> list[dict[str, list[str]]]:
    """CompactRules: verbs of rules for one group, one resource and one name merged."""
    merged: dict[tuple[str, str, str | None], dict[str, list[str]]] = {}
    out = []
    for rule in rules:
        if "nonResourceURLs" in rule:
            out.append(rule)
            continue
        key = (rule["apiGroups"][0], rule["resources"][0], next(iter(rule.get("resourceNames") or ()), None))
        if key in merged:
            merged[key]["verbs"] += [v for v in rule["verbs"] if v not in merged[key]["verbs"]]
        else:
            merged[key] = copy.deepcopy(rule)
    return out + list(merged.values())


def _go_quote(text: str) -> str:
    return json.dumps(text)


def _go_quote_list(items: list[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(_go_quote(i) for i in items) + "]"


def _compact_string(rule: Mapping[str, list[str]]) -> str:
    """rbacv1helpers.CompactString: {APIGroups:[""], Resources:["pods"], Verbs:["patch"]}."""
    parts = [f"{label}:{_go_quote_list(rule[key])}" for label, key in (
        ("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"), ("Verbs", "verbs")) if rule.get(key)]
    return "{" + ", ".join(parts) + "}"
