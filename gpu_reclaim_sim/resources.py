"""The resource types the node agent follows (their plurals, groups and kinds, as the API
server's discovery names them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_META_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    namespaced: bool
    group: str = ""
    version: str = "v1"
    short_names: tuple[str, ...] = ()
    # field labels the real apiserver accepts in fieldSelector for this resource
    field_labels: tuple[str, ...] = _META_FIELDS
    status_subresource: bool = False
    scale_subresource: bool = False
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(VERBS)
    # False for the review kinds: a create is answered, nothing is stored
    stored: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def field_value(self, obj: dict[str, Any], label: str) -> str:
        """The string a field selector compares, as the apiserver's field set gives it."""
        if label == "source":  # events: source.component
            return str((obj.get("source") or {}).get("component") or "")
        cur: Any = obj
        for part in label.split("."):
            if not isinstance(cur, dict):
                cur = None
                break
            cur = cur.get(part)
        if cur is None:
            return "false" if label in ("spec.hostNetwork", "spec.unschedulable") else ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)


CORE = [
    ResourceType("namespaces", "Namespace", False, short_names=("ns",),
                 field_labels=("metadata.name", "status.phase"), status_subresource=True,
                 verbs=tuple(v for v in VERBS if v != "deletecollection")),
    ResourceType("nodes", "Node", False, short_names=("no",),
                 field_labels=("metadata.name", "spec.unschedulable"), status_subresource=True),
    ResourceType("pods", "Pod", True, short_names=("po",), categories=("all",),
                 status_subresource=True,
                 field_labels=_META_FIELDS + (
                     "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                     "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                     "status.podIP", "status.nominatedNodeName")),
    ResourceType("events", "Event", True, short_names=("ev",),
                 field_labels=_META_FIELDS + (
                     "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion",
                     "involvedObject.resourceVersion", "involvedObject.fieldPath",
                     "reason", "reportingComponent", "source", "type")),
    ResourceType("persistentvolumeclaims", "PersistentVolumeClaim", True, short_names=("pvc",),
                 status_subresource=True),
    ResourceType("services", "Service", True, short_names=("svc",), categories=("all",),
                 status_subresource=True),
    ResourceType("secrets", "Secret", True, field_labels=_META_FIELDS + ("type",)),
    ResourceType("configmaps", "ConfigMap", True, short_names=("cm",)),
    ResourceType("serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    ResourceType("endpoints", "Endpoints", True, short_names=("ep",)),
    ResourceType("persistentvolumes", "PersistentVolume", False, short_names=("pv",),
                 status_subresource=True),
]
RBAC_GROUP = "rbac.authorization.k8s.io"
_REVIEW = {"verbs": ("create",), "stored": False, "field_labels": ()}
GROUPS = [
    ResourceType("priorityclasses", "PriorityClass", False, group="scheduling.k8s.io",
                 short_names=("pc",)),
    ResourceType("deployments", "Deployment", True, group="apps", short_names=("deploy",),
                 categories=("all",), status_subresource=True, scale_subresource=True),
    ResourceType("replicasets", "ReplicaSet", True, group="apps", short_names=("rs",),
                 categories=("all",), status_subresource=True, scale_subresource=True),
    ResourceType("statefulsets", "StatefulSet", True, group="apps", short_names=("sts",),
                 categories=("all",), status_subresource=True, scale_subresource=True),
    ResourceType("daemonsets", "DaemonSet", True, group="apps", short_names=("ds",),
                 categories=("all",), status_subresource=True),
    ResourceType("endpointslices", "EndpointSlice", True, group="discovery.k8s.io"),
    ResourceType("storageclasses", "StorageClass", False, group="storage.k8s.io", short_names=("sc",)),
    ResourceType("poddisruptionbudgets", "PodDisruptionBudget", True, group="policy", short_names=("pdb",),
                 status_subresource=True),
    ResourceType("networkpolicies", "NetworkPolicy", True, group="networking.k8s.io",
                 short_names=("netpol",)),
    ResourceType("roles", "Role", True, group=RBAC_GROUP),
    ResourceType("clusterroles", "ClusterRole", False, group=RBAC_GROUP),
    ResourceType("rolebindings", "RoleBinding", True, group=RBAC_GROUP),
    ResourceType("clusterrolebindings", "ClusterRoleBinding", False, group=RBAC_GROUP),
    ResourceType("selfsubjectaccessreviews", "SelfSubjectAccessReview", False, group="authorization.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
    ResourceType("selfsubjectrulesreviews", "SelfSubjectRulesReview", False, group="authorization.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
    ResourceType("subjectaccessreviews", "SubjectAccessReview", False, group="authorization.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
    ResourceType("localsubjectaccessreviews", "LocalSubjectAccessReview", True, group="authorization.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
    ResourceType("selfsubjectreviews", "SelfSubjectReview", False, group="authentication.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
    ResourceType("tokenreviews", "TokenReview", False, group="authentication.k8s.io",
                 **_REVIEW),  # type: ignore[arg-type]
]
ALL: list[ResourceType] = CORE + GROUPS
BY_PLURAL: dict[tuple[str, str], ResourceType] = {(r.group, r.plural): r for r in ALL}
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in ALL}


def lookup(group: str, plural: str) -> ResourceType | None:
    return BY_PLURAL.get((group, plural))
