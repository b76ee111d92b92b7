"""The ClusterRoles of the agent's own users (its network plugin, its volume provisioner),
installed when it starts as a cluster's admin applies an add-on's manifest: a ClusterRole named
for the user and its ClusterRoleBinding, made or replaced (a control plane serves agent after
agent, as in the tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException


async def install(admin: k8s.ApiClient, user: str, rules: list[dict[str, Any]]) -> None:
    rbac = k8s.RbacAuthorizationV1Api(admin)
    role = {"metadata": {"name": user}, "rules": rules}
    binding = {"metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    writes: list[tuple[Callable[..., Any], Callable[..., Any], dict]] = [
        (rbac.create_cluster_role, rbac.replace_cluster_role, role),
        (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding)]
    for create, replace, body in writes:
        try:
            await create(body)
        except ApiException as e:
            if e.status != 409:
                raise
            await replace(user, body)
