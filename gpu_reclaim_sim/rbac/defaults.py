"""The default ClusterRoles and ClusterRoleBindings a cluster starts with (`bootstrap`), and
`RoleAggregator`, the controller that fills an aggregated ClusterRole's rules."""

from __future__ import annotations

from typing import Callable

from .authn import MASTERS
from ..resources import RBAC_GROUP
from ..selectors import object_label_matcher
from ..store import Change, Obj, Store
from .authorizer import CLUSTER_ROLE, CLUSTER_ROLE_BINDING

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
            stored = self.store.find(CLUSTER_ROLE, None, name)
            if stored is not None and (stored.get("rules") or []) != rules:
                def set_rules(o: Obj, rules: list[Obj] = rules) -> None:
                    o["rules"] = rules

                self.store.update(CLUSTER_ROLE, None, name, set_rules)
                changed = True
        return changed
