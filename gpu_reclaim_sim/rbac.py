"""Authorization as kube-apiserver does it with `--authorization-mode=RBAC`.

- `request_attributes`: the request's attributes as the apiserver's RequestInfoFactory
  computes them (verb from the method, `list`/`watch`/`deletecollection` for collections,
  the `/watch/` prefix, a `metadata.name` field selector naming the object, the
  namespace of `/namespaces/NS/...`, subresources; other paths are non-resource URLs).
- `Authorizer`: `system:masters` is always allowed (the privileged-groups authorizer in
  front of RBAC); then Roles, ClusterRoles, RoleBindings and ClusterRoleBindings are
  evaluated as the RBAC authorizer does (verbs and `*`, apiGroups and `*`, resources,
  `*`, `resource/subresource` and `*/subresource`, resourceNames, nonResourceURLs with a
  trailing `*`; User, Group and ServiceAccount subjects). Bindings are indexed by subject
  and the index is rebuilt only when an RBAC object changes, so a check is a few dict
  look-ups.
- `forbidden`: the 403 `Status` in the apiserver's words.
- `confirm_no_escalation`: creating or updating a Role or ClusterRole needs every
  permission it grants (or `escalate`); a binding needs the permissions of its role (or
  `bind` on it); `system:masters` may do anything.
- `bootstrap`: the default ClusterRoles and ClusterRoleBindings a cluster starts with that
  clients rely on (cluster-admin, admin/edit/view aggregated from
  `system:aggregate-to-*`, system:basic-user, system:discovery,
  system:public-info-viewer), and `RoleAggregator`, the controller that fills an
  aggregated ClusterRole's rules from the ClusterRoles its `aggregationRule` selects.
- Access reviews: SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview,
  LocalSubjectAccessReview, SelfSubjectRulesReview (`kubectl auth can-i --list`) and
  SelfSubjectReview (`kubectl auth whoami`).
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from . import errors
from .authn import MASTERS, UserInfo
from .resources import BY_KIND, RBAC_GROUP
from .selectors import object_label_matcher
from .store import Change, Obj, Store

TRUE = ("true", "True", "1")  # what a boolean query parameter (`watch=…`) accepts as true
_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
ROLE, CLUSTER_ROLE, ROLE_BINDING, CLUSTER_ROLE_BINDING = (BY_KIND[k] for k in (
    "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"))
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes: what a request does, as RBAC sees it."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """RequestInfoFactory.NewRequestInfo, for a request to `path`."""
    non_resource = Attributes(user, method.lower(), resource_request=False, path=path)
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            return Attributes(user, "", path=path, api_group=group, api_version=version)
        verb, parts = parts[0], parts[1:]
    else:
        verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in TRUE else "list"
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("==") if "==" in term else term.partition("=")
            if sep and key.strip() == "metadata.name" and not key.endswith("!") and _path_segment_ok(value):
                name = value.strip()
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path, namespace, group, version, resource, subresource, name)


def _path_segment_ok(name: str) -> bool:
    name = name.strip()
    return bool(name) and name not in (".", "..") and "/" not in name and "%" not in name


# --- rules --------------------------------------------------------------------------------

class Rule:
    """One PolicyRule, with its lists as sets for matching."""

    __slots__ = ("verbs", "groups", "resources", "names", "urls", "raw")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.verbs = frozenset(raw.get("verbs") or ())
        self.groups = frozenset(raw.get("apiGroups") or ())
        self.resources = frozenset(raw.get("resources") or ())
        self.names = frozenset(raw.get("resourceNames") or ())
        self.urls = tuple(raw.get("nonResourceURLs") or ())

    def allows(self, a: Attributes) -> bool:
        """rbac.RuleAllows."""
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.resource_request:
            return any(u == "*" or u == a.path or (u.endswith("*") and a.path.startswith(u.rstrip("*")))
                       for u in self.urls)
        if "*" not in self.groups and a.api_group not in self.groups:
            return False
        res = self.resources
        if "*" not in res:
            combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
            if combined not in res and not (a.subresource and f"*/{a.subresource}" in res):
                return False
        return not self.names or a.name in self.names


@dataclass(frozen=True)
class Grant:
    """What one binding gives one subject: its role's rules, or why they are missing."""

    source: str  # "RoleBinding \"hub/jhub\" of Role \"hub\" to ServiceAccount \"hub/jhub\""
    rules: tuple[Rule, ...]
    error: str = ""


SubjectKey = tuple[str, str]  # ("u", user name) or ("g", group name)


def _subject_key(subject: Mapping[str, Any], binding_namespace: str) -> SubjectKey | None:
    kind, name = subject.get("kind"), subject.get("name") or ""
    if kind == "User":
        return ("u", name)
    if kind == "Group":
        return ("g", name)
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return ("u", f"system:serviceaccount:{ns}:{name}") if ns else None
    return None


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class _Index:
    """Grants by subject: cluster-wide (ClusterRoleBindings) and per namespace (RoleBindings)."""

    def __init__(self, store: Store) -> None:
        roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): _compile(o.get("rules"))
                 for o in store.objects(ROLE)}
        cluster_roles = {o["metadata"]["name"]: _compile(o.get("rules")) for o in store.objects(CLUSTER_ROLE)}
        self.cluster: dict[SubjectKey, list[Grant]] = defaultdict(list)
        self.namespaced: dict[str, dict[SubjectKey, list[Grant]]] = defaultdict(lambda: defaultdict(list))

        def resolve(ref: Mapping[str, Any], namespace: str) -> tuple[tuple[Rule, ...], str]:
            kind, name = ref.get("kind"), ref.get("name", "")
            found = cluster_roles.get(name) if kind == "ClusterRole" else roles.get((namespace, name))
            if found is None:
                return (), f'{"clusterrole" if kind == "ClusterRole" else "role"}.{RBAC_GROUP} "{name}" not found'
            return found, ""

        for crb in sorted(store.objects(CLUSTER_ROLE_BINDING), key=lambda o: o["metadata"]["name"]):
            ref = crb.get("roleRef") or {}
            rules, error = resolve(ref, "")
            for subject in crb.get("subjects") or []:
                key = _subject_key(subject, "")
                if key is not None:
                    self.cluster[key].append(Grant(
                        f'ClusterRoleBinding "{crb["metadata"]["name"]}" of {ref.get("kind")} "{ref.get("name")}" '
                        f'to {_describe_subject(subject, "")}', rules, error))
        for rb in sorted(store.objects(ROLE_BINDING), key=lambda o: (o["metadata"]["namespace"],
                                                                     o["metadata"]["name"])):
            ns, ref = rb["metadata"]["namespace"], rb.get("roleRef") or {}
            rules, error = resolve(ref, ns)
            for subject in rb.get("subjects") or []:
                key = _subject_key(subject, ns)
                if key is not None:
                    self.namespaced[ns][key].append(Grant(
                        f'RoleBinding "{rb["metadata"]["name"]}/{ns}" of {ref.get("kind")} "{ref.get("name")}" '
                        f'to {_describe_subject(subject, ns)}', rules, error))

    def grants(self, user: UserInfo, namespace: str) -> Iterable[Grant]:
        """Every grant that applies to `user` in `namespace` ("" for cluster scope), cluster
        bindings first, as VisitRulesFor visits them."""
        keys = [("u", user.name)] + [("g", g) for g in user.groups]
        for key in keys:
            yield from self.cluster.get(key, ())
        if namespace:
            by_subject = self.namespaced.get(namespace)
            if by_subject:
                for key in keys:
                    yield from by_subject.get(key, ())


def _compile(rules: Any) -> tuple[Rule, ...]:
    return tuple(Rule(r) for r in rules or () if isinstance(r, dict))


class Authorizer:
    """`authorize(attributes)` -> (allowed, reason); `mode` "RBAC" or "AlwaysAllow"."""

    def __init__(self, store: Store, mode: str = "RBAC") -> None:
        self.store = store
        self.mode = mode
        self._index: _Index | None = None
        for rtype in (ROLE, CLUSTER_ROLE, ROLE_BINDING, CLUSTER_ROLE_BINDING):
            store.subscribe(rtype, self._on_change)

    def _on_change(self, change: Change) -> None:
        self._index = None

    @property
    def index(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.store)
        return self._index

    def authorize(self, a: Attributes) -> tuple[bool, str]:
        if MASTERS in a.user.groups or self.mode == "AlwaysAllow":
            return True, ""
        errors_seen: list[str] = []
        for grant in self.index.grants(a.user, a.namespace):
            if grant.error:
                errors_seen.append(grant.error)
                continue
            for rule in grant.rules:
                if rule.allows(a):
                    return True, f"RBAC: allowed by {grant.source}"
        if not errors_seen:
            return False, ""
        return False, "RBAC: " + (errors_seen[0] if len(errors_seen) == 1 else "[" + ", ".join(errors_seen) + "]")

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[Obj], list[str]]:
        """The rules that apply to `user` in `namespace`, and the role references that
        could not be resolved (RulesFor)."""
        if MASTERS in user.groups or self.mode == "AlwaysAllow":
            return [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                    {"verbs": ["*"], "nonResourceURLs": ["*"]}], []
        rules, errs = [], []
        for grant in self.index.grants(user, namespace):
            if grant.error:
                errs.append(grant.error)
            rules += [r.raw for r in grant.rules]
        return rules, errs

    def check(self, a: Attributes) -> None:
        """Raise the apiserver's 403 unless `a` is allowed."""
        allowed, reason = self.authorize(a)
        if not allowed:
            raise forbidden(a, reason)


def forbidden(a: Attributes, reason: str = "") -> errors.ApiError:
    """responsewriters.Forbidden: `pods "x" is forbidden: User "u" cannot patch resource
    "pods" in API group "" in the namespace "jhub"` (and the collection, cluster-scope and
    non-resource variants)."""
    if not a.resource_request:
        message = f'User "{a.user.name}" cannot {a.verb} path "{a.path}"'
    else:
        resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
        message = f'User "{a.user.name}" cannot {a.verb} resource "{resource}" in API group "{a.api_group}" {where}'
    if reason:
        message = f"{message}: {reason}"
    return errors.forbidden(a.resource if a.resource_request else "", a.name if a.resource_request else "",
                            message, a.api_group if a.resource_request else "")


# --- escalation prevention ---------------------------------------------------------------

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
        key = (rule["apiGroups"][0], rule["resources"][0], (rule.get("resourceNames") or [None])[0])
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


# --- validation (admission calls these) ---------------------------------------------------

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


# --- the default policy and role aggregation ----------------------------------------------

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _r(groups: list[str], resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def default_cluster_roles() -> list[Obj]:
    """The bootstrap ClusterRoles clients and charts rely on (kube-apiserver's
    bootstrappolicy, limited to the API groups a cluster usually has)."""
    view = [
        _r([""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
                  "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
                  "services/status"], _READ),
        _r([""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                  "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], _READ),
        _r([""], ["namespaces"], _READ),
        _r(["discovery.k8s.io"], ["endpointslices"], _READ),
        _r(["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                      "deployments/status", "replicasets", "replicasets/scale", "replicasets/status",
                      "statefulsets", "statefulsets/scale", "statefulsets/status"], _READ),
        _r(["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], _READ),
        _r(["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _READ),
        _r(["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], _READ),
        _r(["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"], _READ),
    ]
    edit = [
        _r([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], _READ),
        _r([""], ["serviceaccounts"], ["impersonate"]),
        _r([""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], _WRITE),
        _r([""], ["pods/eviction"], ["create"]),
        _r([""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                  "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], _WRITE),
        _r([""], ["serviceaccounts/token"], ["create"]),
        _r(["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
                      "replicasets/scale", "statefulsets", "statefulsets/scale"], _WRITE),
        _r(["autoscaling"], ["horizontalpodautoscalers"], _WRITE),
        _r(["batch"], ["cronjobs", "jobs"], _WRITE),
        _r(["policy"], ["poddisruptionbudgets"], _WRITE),
        _r(["networking.k8s.io"], ["ingresses", "networkpolicies"], _WRITE),
        _r(["coordination.k8s.io"], ["leases"], _ALL),
    ]
    admin = [
        _r(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
        _r([RBAC_GROUP], ["rolebindings", "roles"], _ALL),
    ]

    def role(name: str, rules: list[Obj] | None, labels: dict[str, str] | None = None,
             aggregate_from: str | None = None) -> Obj:
        obj: Obj = {"metadata": {"name": name,
                                 "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
                                 "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                    "rules": rules or []}
        if aggregate_from:
            obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {_AGGREGATE + aggregate_from: "true"}}]}
        return obj

    return [
        role("cluster-admin", [_r(["*"], ["*"], ["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        role("admin", None, aggregate_from="admin"),
        role("edit", None, {_AGGREGATE + "admin": "true"}, aggregate_from="edit"),
        role("view", None, {_AGGREGATE + "edit": "true"}, aggregate_from="view"),
        role("system:aggregate-to-admin", admin, {_AGGREGATE + "admin": "true"}),
        role("system:aggregate-to-edit", edit, {_AGGREGATE + "edit": "true"}),
        role("system:aggregate-to-view", view, {_AGGREGATE + "view": "true"}),
        role("system:basic-user", [
            _r(["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], ["create"]),
            _r(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"])]),
        role("system:discovery", [{"nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
            "/version", "/version/"], "verbs": ["get"]}]),
        role("system:public-info-viewer", [{"nonResourceURLs": [
            "/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        role("system:auth-delegator", [
            _r(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
            _r(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"])]),
    ]


def default_cluster_role_bindings() -> list[Obj]:
    def binding(name: str, *groups: str) -> Obj:
        return {"metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                             "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups]}

    return [binding("cluster-admin", MASTERS),
            binding("system:basic-user", "system:authenticated"),
            binding("system:discovery", "system:authenticated"),
            binding("system:public-info-viewer", "system:authenticated", "system:unauthenticated")]


def bootstrap(store: Store, create: Callable[..., Obj]) -> None:
    """The apiserver's rbac/bootstrap-roles post-start hook: create what is missing."""
    for rtype, objs in ((CLUSTER_ROLE, default_cluster_roles()),
                        (CLUSTER_ROLE_BINDING, default_cluster_role_bindings())):
        for obj in objs:
            if store.find(rtype, None, obj["metadata"]["name"]) is None:
                create(rtype, obj)


class RoleAggregator:
    """The clusterrole-aggregation controller: an aggregated ClusterRole's rules are the
    rules of the ClusterRoles its selectors match, by name, without repeats."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._busy = False
        store.subscribe(CLUSTER_ROLE, self._on_change)

    def _on_change(self, change: Change) -> None:
        if not self._busy:
            self._busy = True
            try:
                self.sync()
            finally:
                self._busy = False

    def sync(self) -> None:
        """Aggregate until nothing changes (an aggregated role may feed another: edit into admin)."""
        for _ in range(10):
            if not self._pass():
                return

    def _pass(self) -> bool:
        changed = False
        roles = sorted(self.store.objects(CLUSTER_ROLE), key=lambda o: o["metadata"]["name"])
        for role in roles:
            rule = role.get("aggregationRule")
            if not isinstance(rule, dict):
                continue
            name = role["metadata"]["name"]
            rules: list[Obj] = []
            for selector in rule.get("clusterRoleSelectors") or []:
                matches = object_label_matcher(selector)
                for other in roles:
                    if other["metadata"]["name"] == name or not matches(other["metadata"].get("labels") or {}):
                        continue
                    current = self.store.find(CLUSTER_ROLE, None, other["metadata"]["name"]) or other
                    rules += [r for r in current.get("rules") or [] if r not in rules]
            current = self.store.find(CLUSTER_ROLE, None, name)
            if current is not None and (current.get("rules") or []) != rules:
                self.store.update(CLUSTER_ROLE, None, name, lambda o: o.__setitem__("rules", rules))
                changed = True
        return changed


# --- access reviews -----------------------------------------------------------------------

def review(authorizer: Authorizer, kind: str, user: UserInfo, body: Any, namespace: str | None) -> Obj:
    """Answer a SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview,
    SelfSubjectRulesReview or SelfSubjectReview created by `user`."""
    if not isinstance(body, dict):
        raise errors.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}')
    group = "authentication.k8s.io" if kind == "SelfSubjectReview" else "authorization.k8s.io"
    out: Obj = {"kind": kind, "apiVersion": f"{group}/v1",
                "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None}}
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    if kind == "SelfSubjectReview":
        out["status"] = {"userInfo": user.as_json()}
        return out
    out["spec"] = spec
    if kind == "SelfSubjectRulesReview":
        ns = spec.get("namespace") or ""
        rules, errs = authorizer.rules_for(user, ns)
        out["status"] = {
            "resourceRules": [{k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if k in r}
                              for r in rules if not r.get("nonResourceURLs")],
            "nonResourceRules": [{"verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]}
                                 for r in rules if r.get("nonResourceURLs")],
            "incomplete": bool(errs)}
        if errs:
            out["status"]["evaluationError"] = "[" + ", ".join(errs) + "]"
        return out
    subject = user
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
        if not spec.get("user") and not spec.get("groups"):
            raise errors.invalid(kind, "", [_cause("spec.user", "FieldValueInvalid",
                                                   'Invalid value: "": at least one of user or group must be '
                                                   "specified")], group)
        subject = UserInfo(spec.get("user") or "", tuple(spec.get("groups") or ()), spec.get("uid") or "",
                           tuple((k, tuple(v)) for k, v in (spec.get("extra") or {}).items()))
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if bool(res) == bool(non):
        message = ("cannot be specified in combination with resourceAttributes" if res else
                   "exactly one of nonResourceAttributes or resourceAttributes must be specified")
        raise errors.invalid(kind, "", [_cause("spec.resourceAttributes" if not res else "spec.nonResourceAttributes",
                                               "FieldValueRequired" if not res else "FieldValueInvalid",
                                               ("Required value: " if not res else "Invalid value: ") + message)],
                             group)
    if kind == "LocalSubjectAccessReview" and (res or {}).get("namespace", namespace) != namespace:
        raise errors.invalid(kind, "", [_cause("spec.resourceAttributes.namespace", "FieldValueInvalid",
                                               f'Invalid value: {json.dumps(res.get("namespace"))}: must match '
                                               "metadata.namespace")], group)
    if res:
        a = Attributes(subject, res.get("verb") or "", True, "", res.get("namespace") or "", res.get("group") or "",
                       res.get("version") or "", res.get("resource") or "", res.get("subresource") or "",
                       res.get("name") or "")
    else:
        a = Attributes(subject, non.get("verb") or "", False, non.get("path") or "")
    allowed, reason = authorizer.authorize(a)
    out["status"] = {"allowed": allowed}
    if reason:
        out["status"]["reason"] = reason
    return out
