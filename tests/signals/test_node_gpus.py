"""The cluster's GPUs from the node list (signals/node_gpus.py), counted as a pod's GPUs are:
whole GPUs, MIG instances and time-sliced replicas; anything malformed counts none."""

from __future__ import annotations

import pytest

from jupyterhub_gpu_reclaim.signals.node_gpus import gpus_of


def node(**allocatable):
    return {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8", "memory": "64Gi", **allocatable}}}


def test_gpus_of_the_nodes():
    nodes = {"items": [node(**{"nvidia.com/gpu": "4"}), node(**{"nvidia.com/gpu": "2", "nvidia.com/mig-1g.5gb": "7"}),
                       node(**{"nvidia.com/gpu.shared": "8"}), node(), {"metadata": {}}]}
    assert gpus_of(nodes) == 4 + 2 + 7 + 8
    assert gpus_of({"items": []}) == gpus_of({}) == 0


def test_malformed_values_count_none():
    nodes = {"items": [node(**{"nvidia.com/gpu": "lots"}), node(**{"nvidia.com/gpu": 3}), node(**{"nvidia.com/gpu": "-1"}),
                       {"status": {"allocatable": ["nvidia.com/gpu"]}}, "a string", None, node(**{"nvidia.com/gpu": "1"})]}
    assert gpus_of(nodes) == 1
    with pytest.raises(ValueError):
        gpus_of(["not", "a", "node list"])
