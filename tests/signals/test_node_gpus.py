"""The cluster's GPUs from the node list (signals/node_gpus.py), counted as a pod's GPUs are:
whole GPUs, MIG instances and time-sliced replicas, each kind apart and said in words;
anything malformed counts none."""

from __future__ import annotations

import pytest

from jupyterhub_gpu_reclaim.signals.node_gpus import gpus_of, in_words


def node(labels=None, **allocatable):
    return {"metadata": {"name": "n", "labels": labels or {}},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", **allocatable}}}


def test_gpus_of_the_nodes_by_kind():
    """Time-sliced replicas are shared GPUs, renamed (nvidia.com/gpu.shared, of a GPU or a MIG
    instance) or not (on a node GPU feature discovery labels <model>-SHARED)."""
    nodes = {"items": [node(**{"nvidia.com/gpu": "4"}), node(**{"nvidia.com/gpu": "2", "nvidia.com/mig-1g.5gb": "7"}),
                       node(**{"nvidia.com/gpu.shared": "8", "nvidia.com/mig-1g.5gb.shared": "2"}),
                       node({"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, **{"nvidia.com/gpu": "4"}),
                       node(), {"metadata": {}}]}
    assert gpus_of(nodes) == {"gpu": 6, "mig": 7, "shared": 14}
    assert list(gpus_of(nodes)) == ["gpu", "mig", "shared"]  # in the order they are said
    assert gpus_of({"items": []}) == gpus_of({}) == {}


def test_gpus_in_words():
    assert in_words({"gpu": 4, "mig": 7}) == "4 GPUs and 7 MIG slices"
    assert in_words({"gpu": 4, "mig": 7, "shared": 1}, {"gpu": 2, "mig": 3}) == \
        "2 of 4 GPUs, 3 of 7 MIG slices and 0 of 1 shared GPU"
    assert in_words({"mig": 1}, {"mig": 1}) == "1 of 1 MIG slice"
    assert in_words({}) == in_words({}, {}) == "0 GPUs"


def test_malformed_values_count_none():
    nodes = {"items": [node(**{"nvidia.com/gpu": "lots"}), node(**{"nvidia.com/gpu": 3}), node(**{"nvidia.com/gpu": "-1"}),
                       node(**{"nvidia.com/gpu": "²"}), node(**{"nvidia.com/gpu": "٣"}),  # digits, not numbers Kubernetes writes
                       {"status": {"allocatable": ["nvidia.com/gpu"]}}, "a string", None, node(**{"nvidia.com/gpu": "1"})]}
    assert gpus_of(nodes) == {"gpu": 1}
    with pytest.raises(ValueError):
        gpus_of(["not", "a", "node list"])
