"""The node agent's network plugin as the API server knows it: the part of a CNI plugin that
enforces NetworkPolicies reads NetworkPolicies, namespaces' and pods' labels (the data plane,
sim.network.dataplane, compiles them into its nftables rules). It reads them as a user of its
own, `USER`, with a ClusterRole of its own (`RULES`), installed when the agent starts as a cluster's
admin installs a CNI plugin's manifest (sim.nodeagent.clusterroles; Calico's `calico-node` role
grants the same reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client as k8s

from ..resources import BY_KIND, ResourceType

USER = "gpu-reclaim-sim:network-plugin"
RULES = [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]}]


def lists(api: k8s.ApiClient) -> list[tuple[ResourceType, Callable[..., Any]]]:
    """What it follows (sim.nodeagent.nodeservices.ApiMirror), through `api` (as `USER`)."""
    core, networking = k8s.CoreV1Api(api), k8s.NetworkingV1Api(api)
    return [(BY_KIND["NetworkPolicy"], networking.list_network_policy_for_all_namespaces),
            (BY_KIND["Namespace"], core.list_namespace), (BY_KIND["Pod"], core.list_pod_for_all_namespaces)]
