"""Kubernetes resource quantities (`500m`, `2Gi`, `1.5`, `1e3`) as exact numbers.

The implementation is `jupyterhub_gpu_reclaim.spawner.kube.parse_quantity`, shared with the
spawner; these names stay for the simulated cluster's modules."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.spawner.kube import is_valid_quantity as is_valid
from jupyterhub_gpu_reclaim.spawner.kube import parse_quantity as parse

__all__ = ["parse", "is_valid"]
