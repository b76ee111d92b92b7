"""Nodes and pods as the scheduler's tests write them (the fields kube-scheduler reads),
and the scheduler's own views of them."""

from __future__ import annotations

import itertools
from typing import Any

from gpu_reclaim_sim.scheduler import facts as sfacts

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
MiB = 1024 * 1024
_uids = itertools.count(1)


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0, pods: int = 110,
         labels: dict | None = None, taints: list | None = None, images: dict | None = None,
         ready: str | None = "True", unschedulable: bool = False) -> dict:
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    if gpus:
        capacity[GPU] = str(gpus)
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {"capacity": capacity, "allocatable": dict(capacity), "conditions": conditions,
                   "images": [{"names": [n], "sizeBytes": size} for n, size in (images or {}).items()]},
    }


def pod(name: str, *, ns: str = "jhub", cpu: str | None = None, memory: str | None = None, gpus: int = 0,
        priority: int = 0, node_name: str | None = None, image: str = "quay.io/jupyter/base-notebook:2025",
        tolerations: list | None = None, node_selector: dict | None = None, affinity: dict | None = None,
        phase: str = "Pending", grace: int = 30, policy: str = "PreemptLowerPriority",
        start: str | None = None) -> dict:
    requests: dict[str, Any] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if gpus:
        requests[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "notebook", "image": image, "resources": {"requests": requests}}],
        "priority": priority, "preemptionPolicy": policy, "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": grace, "tolerations": tolerations or [],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    status: dict[str, Any] = {"phase": phase}
    if start:
        status["startTime"] = start
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{next(_uids)}",
                         "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": spec, "status": status}


def view(p: dict) -> sfacts.PodView:
    return sfacts.PodView.from_pod(p)


def facts(n: dict) -> sfacts.NodeFacts:
    return sfacts.NodeFacts.from_node(n)
