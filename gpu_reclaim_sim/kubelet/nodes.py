"""The Node object a simulated kubelet registers for a node of a scenario's node group."""

from __future__ import annotations

from typing import Any

from ..scenario import NodeGroup, Scenario
from ..api.timestamps import rfc3339

GROUP_LABEL = "sim.jupyterhub-gpu-reclaim/node-group"
KUBELET_PORT = 10250  # the kubelet API's port, unless a node says otherwise
MAX_IMAGES = 50  # the kubelet reports only the largest 50 images (nodeStatusMaxImages)


def gpu_labels(group: NodeGroup) -> dict[str, str]:
    """GPU feature discovery's labels: the physical GPUs, and how they are shared."""
    sharing, product = group.sharing, group.gpu_model.replace(" ", "-")
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(group.gpus),  # physical GPUs, whatever is advertised
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(group.gpu_memory_mib),
    }
    if sharing.mig_profile:
        labels.update({"nvidia.com/mig.strategy": "mixed",
                       f"{sharing.resource}.count": str(sharing.devices(group.gpus))})
    elif sharing.time_sliced:
        labels.update({"nvidia.com/gpu.replicas": str(sharing.replicas),
                       "nvidia.com/gpu.sharing-strategy": "time-slicing"})
        if not sharing.rename_by_default:
            labels["nvidia.com/gpu.product"] = f"{product}-SHARED"
    return labels


def node_manifest(name: str, group: NodeGroup, scenario: Scenario, images: Any = None,
                  address: str = "127.100.0.1", *, version: str, port: int = KUBELET_PORT,
                  features: tuple[str, ...] = ()) -> dict[str, Any]:
    """The Node as registered: labels (incl. GPU feature discovery's), taints, capacity,
    the images already pulled and a Ready condition. `images` is an ImageRegistry;
    `version` the kubelet's (the API server's); `port` where its kubelet API
    listens at `address`; `features` what it declares (status.declaredFeatures)."""
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
        labels.update(gpu_labels(group))
        sharing = group.sharing
        if sharing.resource != "nvidia.com/gpu":
            capacity["nvidia.com/gpu"] = "0"  # the plugin still registers it, with no device
        capacity[sharing.resource] = str(sharing.devices(group.gpus))
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
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux",
                "containerRuntimeVersion": "sim://1.0", "kubeletVersion": version,
                "kubeProxyVersion": version, "osImage": "jupyterhub-gpu-reclaim simulated node",
                "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
            },
            "images": status_images,
            **({"declaredFeatures": list(features)} if features else {}),
        },
    }


def with_image(images: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A Node's `status.images` with `entry` (ImageRegistry.status_entry) added: the largest
    `MAX_IMAGES`, as the kubelet reports them."""
    names = set(entry["names"])
    kept = [i for i in images if not names & set(i["names"])]
    return sorted(kept + [entry], key=lambda e: -e["sizeBytes"])[:MAX_IMAGES]
