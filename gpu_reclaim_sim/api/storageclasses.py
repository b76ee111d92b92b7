"""The simulated cluster's one StorageClass, as kind's `standard`: marked default, so a claim
that names no class gets it (the DefaultStorageClass admission plugin), served by a provisioner
of local directories (kind's local-path one: sim.nodeagent.provisioner), deleted with its claim.
Bound when the first pod that uses it is scheduled (`WaitForFirstConsumer`, as the default
classes of kind, GKE and EKS are): with `Immediate`, a user's pod created right after its home's
claim found it unbound, and the real scheduler's retry could come minutes later."""

from __future__ import annotations

from typing import Any

DEFAULT_CLASS = "standard"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
PROVISIONER = "sim.jupyterhub-gpu-reclaim/local-path"


def default_storage_class() -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": DEFAULT_CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}
