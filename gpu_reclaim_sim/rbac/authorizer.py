"""RBAC authorization: a request's attributes as the apiserver's RequestInfoFactory computes
them, the RBAC authorizer over Roles, ClusterRoles and their bindings (indexed by subject),
and the 403 it answers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .. import errors
from .authn import MASTERS, UserInfo
from ..resources import BY_KIND, RBAC_GROUP
from ..store import Change, Obj, Store

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


class Rule:
    """One PolicyRule, with its lists as sets for matching."""

    __slots__ = ("verbs", "groups", "resources", "names", "urls", "raw")

    def __init__(self, raw: Obj) -> None:
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
