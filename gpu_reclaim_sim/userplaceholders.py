"""A scenario's user placeholders on the real control plane, as z2jh's chart makes them
(templates/scheduling/user-placeholder/statefulset.yaml, with `scheduling.podPriority` on):
a StatefulSet of pause pods (`podManagementPolicy: Parallel`, grace period 0, no service
account token, the pause container as nobody) with the placeholders' low PriorityClass and a
user pod's requests, node selector and tolerations. The real controller-manager keeps the
pods; the real kube-scheduler lets user pods preempt them; a preempted one is made again and
waits Pending, which is what makes the cluster autoscaler (sim.nodeagent.clusterautoscaler) add a
node before users need it."""

from __future__ import annotations

from typing import Any

from .api.quantity import parse
from .scenario import Placeholder

# the chart's scheduling.userPlaceholder.image (values.yaml of z2jh 4.x)
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
# requests the API server lets a container have without an equal limit (extended resources,
# GPUs among them, need one)
_OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


def statefulset(p: Placeholder) -> dict[str, Any]:
    """z2jh's user-placeholder StatefulSet for the scenario's placeholder entry `p` (its name
    the StatefulSet's; `release` in the labels is that name too, so that entries differ)."""
    labels = {"app": "jupyterhub", "component": "user-placeholder", "release": p.name}
    requests = {k: v for k, v in p.requests.items() if parse(v) > 0}
    resources: dict[str, Any] = {"requests": requests} if requests else {}
    if limits := {k: v for k, v in requests.items() if k not in _OVERCOMMITTABLE}:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [{"name": "pause", "image": PAUSE_IMAGE, "resources": resources, "securityContext": {
            "runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}],
    }
    if p.priority_class_name:
        spec["priorityClassName"] = p.priority_class_name
    if p.node_selector:
        spec["nodeSelector"] = dict(p.node_selector)
    if p.tolerations:
        spec["tolerations"] = [dict(t) for t in p.tolerations]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": p.name, "namespace": p.namespace, "labels": labels},
            "spec": {"podManagementPolicy": "Parallel", "replicas": p.count, "selector": {"matchLabels": labels},
                     "serviceName": p.name, "template": {"metadata": {"labels": labels}, "spec": spec}}}
