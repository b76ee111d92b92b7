"""The Node object a simulated kubelet registers for a node of a scenario's node group."""

from __future__ import annotations

from typing import Any

from .openapi import kubernetes_version
from .scenario import NodeGroup, Scenario
from .timestamps import rfc3339

GROUP_LABEL = "sim.jupyterhub-gpu-reclaim/node-group"
MAX_IMAGES = 50  # the kubelet reports only the largest 50 images (nodeStatusMaxImages)


def node_manifest(name: str, group: NodeGroup, scenario: Scenario, images: Any = None,
                  address: str = "127.100.0.1") -> dict[str, Any]:
    """The Node as registered: labels (incl. GPU feature discovery's), taints, capacity,
    the images already pulled and a Ready condition. `images` is an ImageRegistry."""
    capacity = {
        "cpu": group.cpu,
        "memory": group.memory,
        "pods": str(group.pods),
        "ephemeral-storage": "100Gi",
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"sim-{group.name}",
        GROUP_LABEL: group.name,
    }
    if group.gpus:
        capacity["nvidia.com/gpu"] = str(group.gpus)
        labels.update({
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(group.gpus),
            "nvidia.com/gpu.product": group.gpu_model.replace(" ", "-"),
            "nvidia.com/gpu.memory": str(group.gpu_memory_mib),
        })
    labels.update(group.labels)
    stamp = rfc3339()
    status_images = []
    if images is not None:
        status_images = sorted((images.status_entry(ref) for ref in group.images),
                               key=lambda e: -e["sizeBytes"])[:MAX_IMAGES]
    condition = {"lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": [dict(t) for t in group.taints]} if group.taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {"type": t, "status": "False", "reason": r, "message": m, **condition}
                for t, r, m in (
                    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                )
            ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "kubelet is posting ready status", **condition}],
            "addresses": [{"type": "InternalIP", "address": address},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux",
                "containerRuntimeVersion": "sim://1.0", "kubeletVersion": kubernetes_version(),
                "kubeProxyVersion": kubernetes_version(), "osImage": "jupyterhub-gpu-reclaim simulated node",
                "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
            },
            "images": status_images,
        },
    }
