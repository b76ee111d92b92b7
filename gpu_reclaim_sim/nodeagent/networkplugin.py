"""The node agent's network plugin as the API server knows it: the part of a CNI plugin that
enforces NetworkPolicies reads NetworkPolicies, namespaces' and pods' labels (the data plane,
sim.network.dataplane, compiles them into its nftables rules). It reads them as a user of its
own, `USER`, with a ClusterRole of its own, installed when the agent starts as a cluster's
admin installs a CNI plugin's manifest (Calico's `calico-node` role grants the same reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..resources import BY_KIND, ResourceType

USER = "gpu-reclaim-sim:network-plugin"
ROLE = {"metadata": {"name": USER}, "rules": [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]}]}
BINDING = {"metadata": {"name": USER}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                   "name": USER},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]}


async def install(admin: k8s.ApiClient) -> None:
    """The ClusterRole and its binding (as they are: a control plane serves agent after agent)."""
    rbac = k8s.RbacAuthorizationV1Api(admin)
    writes: list[tuple[Callable[..., Any], Callable[..., Any], dict]] = [
        (rbac.create_cluster_role, rbac.replace_cluster_role, ROLE),
        (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, BINDING)]
    for create, replace, body in writes:
        try:
            await create(body)
        except ApiException as e:
            if e.status != 409:
                raise
            await replace(USER, body)


def lists(api: k8s.ApiClient) -> list[tuple[ResourceType, Callable[..., Any]]]:
    """What it follows (sim.nodeagent.nodeservices.ApiMirror), through `api` (as `USER`)."""
    core, networking = k8s.CoreV1Api(api), k8s.NetworkingV1Api(api)
    return [(BY_KIND["NetworkPolicy"], networking.list_network_policy_for_all_namespaces),
            (BY_KIND["Namespace"], core.list_namespace), (BY_KIND["Pod"], core.list_pod_for_all_namespaces)]
