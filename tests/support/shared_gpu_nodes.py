"""The cluster of the MIG and time-sliced live tests (tests/service/test_shared_gpus_live.py,
tests/spawner/test_offer_by_kind_live.py): the demo's (images, priority classes) with only
two GPU nodes, an A100 cut into two MIG 1g.10gb instances and a T4 that two pods share by
time-slicing (`nvidia.com/gpu` replicas, which GPU feature discovery labels `<model>-SHARED`).
Their hubs' profiles are tests/spawner/jupyterhub_config_gpu_kinds.py."""

from __future__ import annotations

from typing import Any

import yaml

from gpu_reclaim_sim.paths import DEFAULT_SCENARIO

IMAGE = "quay.io/jupyterhub/singleuser:latest"
GPU_NODE = {"count": 1, "cpu": "16", "memory": "64Gi", "gpus": 1, "images": [IMAGE],
            "labels": {"hub.jupyter.org/node-purpose": "user"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
NODE_GROUPS = [
    {"name": "mig", **GPU_NODE, "gpuModel": "NVIDIA A100-SXM4-80GB", "gpuMemory": "80GiB",
     "mig": {"profile": "1g.10gb", "perGpu": 2}},
    {"name": "sliced", **GPU_NODE, "gpuModel": "Tesla T4", "gpuMemory": "16GiB", "timeSlicing": {"replicas": 2}},
]
A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4-SHARED"  # the nodes' nvidia.com/gpu.product


def shared_gpus_scenario(name: str) -> dict[str, Any]:
    """The scenario, named `name`, with fast pulls and GPU samples every second."""
    scenario = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    scenario.pop("placeholders", None)
    scenario.update(name=name, bandwidth="2GB/s", gpu={"collectionInterval": "1s"}, nodeGroups=NODE_GROUPS)
    return scenario
