"""The score plugins of the simulated kube-scheduler (v1.30 default profile) with upstream
integer arithmetic and normalisation: NodeResourcesFit (LeastAllocated/MostAllocated),
NodeResourcesBalancedAllocation, ImageLocality, NodeAffinity and TaintToleration, their
weighted sum and the choice of a host. Pure, no I/O."""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Mapping

from jupyterhub_gpu_reclaim.spawner.kube import match_node_selector_term, tolerates

from .facts import BASIC_RESOURCES, NodeFacts, PodView, Usage

GPU = "nvidia.com/gpu"
MAX_NODE_SCORE = 100

# ImageLocality thresholds (bytes, as in the plugin: mb = 1024 * 1024)
MB = 1024 * 1024
IMAGE_MIN_THRESHOLD = 23 * MB
IMAGE_MAX_CONTAINER_THRESHOLD = 1000 * MB

# default plugin weights of the v1.30 default profile
DEFAULT_WEIGHTS: dict[str, float] = {
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "NodeAffinity": 2,
    "TaintToleration": 3,
}
# NodeResourcesFit scoring resources. Upstream's default is cpu and memory only; GPU
# clusters commonly add nvidia.com/gpu so that MostAllocated packs GPUs too. It counts
# only for pods that request it (upstream skips an extended resource a pod does not ask for).
DEFAULT_FIT_RESOURCES: dict[str, int] = {"cpu": 1, "memory": 1, GPU: 1}
BALANCED_RESOURCES: dict[str, int] = {"cpu": 1, "memory": 1}


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    requested = min(requested, capacity)  # pods without requests count as the defaults
    return requested * MAX_NODE_SCORE // capacity


def _allocation_pairs(pod: PodView, node: NodeFacts, usage: Usage, resources: Mapping[str, int],
                      nonzero: bool) -> list[tuple[int, int, int]]:
    """(requested incl. this pod, allocatable, weight) per scored resource, as
    resourceAllocationScorer: an extended resource the pod does not request is skipped."""
    out = []
    for r, weight in resources.items():
        if r == "cpu":
            pod_req = pod.nonzero_cpu if nonzero else pod.requests.get(r, 0)
            used = usage.nonzero_cpu if nonzero else usage.requested.get(r, 0)
        elif r == "memory":
            pod_req = pod.nonzero_memory if nonzero else pod.requests.get(r, 0)
            used = usage.nonzero_memory if nonzero else usage.requested.get(r, 0)
        else:
            pod_req = pod.requests.get(r, 0)
            if pod_req == 0 and r not in BASIC_RESOURCES:
                continue
            used = usage.requested.get(r, 0)
        alloc = node.allocatable.get(r, 0)
        if alloc == 0:
            continue
        out.append((used + pod_req, alloc, weight))
    return out


def resource_fit_score(pod: PodView, node: NodeFacts, usage: Usage, strategy: str = "LeastAllocated",
                       resources: Mapping[str, int] = DEFAULT_FIT_RESOURCES) -> int:
    score_one = most_requested_score if strategy == "MostAllocated" else least_requested_score
    total = weights = 0
    for requested, alloc, weight in _allocation_pairs(pod, node, usage, resources, nonzero=True):
        total += score_one(requested, alloc) * weight
        weights += weight
    return total // weights if weights else 0


def balanced_allocation_score(pod: PodView, node: NodeFacts, usage: Usage,
                              resources: Mapping[str, int] = BALANCED_RESOURCES) -> int:
    fractions = [min(req / alloc, 1.0)
                 for req, alloc, _ in _allocation_pairs(pod, node, usage, resources, nonzero=False)]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def image_spread(nodes: Iterable[NodeFacts]) -> Counter[str]:
    """How many nodes hold each image (ImageStateSummary.NumNodes)."""
    c: Counter[str] = Counter()
    for n in nodes:
        c.update(n.images.keys())
    return c


def image_locality_score(pod: PodView, node: NodeFacts, spread: Mapping[str, int], total_nodes: int) -> int:
    """ImageLocality: sum of size × (nodes with the image / all nodes) over the pod's
    containers whose image the node holds, clamped to [23 MiB, 1000 MiB × containers]
    and scaled to 0..100."""
    total = 0
    for image in pod.images:
        size = node.images.get(image)
        if size is not None and total_nodes:
            total += int(size * (spread.get(image, 0) / total_nodes))
    max_threshold = IMAGE_MAX_CONTAINER_THRESHOLD * max(pod.num_containers, 1)
    total = min(max(total, IMAGE_MIN_THRESHOLD), max_threshold)
    return MAX_NODE_SCORE * (total - IMAGE_MIN_THRESHOLD) // (max_threshold - IMAGE_MIN_THRESHOLD)


def node_affinity_raw_score(pod: PodView, node: NodeFacts) -> int:
    return sum(w for w, term in pod.preferred_terms
               if w and match_node_selector_term(term, node.labels, node.name))


def taint_toleration_raw_score(pod: PodView, node: NodeFacts) -> int:
    """PreferNoSchedule taints the pod does not tolerate (lower is better)."""
    tols = [t for t in pod.tolerations if not t.get("effect") or t.get("effect") == "PreferNoSchedule"]
    return sum(1 for t in node.soft_taints if not any(tolerates(tol, t) for tol in tols))


def default_normalize(scores: dict[str, int], reverse: bool = False) -> dict[str, int]:
    """framework/plugins/helper.DefaultNormalizeScore with maxPriority 100."""
    top = max(scores.values(), default=0)
    if top == 0:
        return {k: (MAX_NODE_SCORE if reverse else 0) for k in scores}
    out = {}
    for k, s in scores.items():
        s = MAX_NODE_SCORE * s // top
        out[k] = MAX_NODE_SCORE - s if reverse else s
    return out


def score_nodes(pod: PodView, candidates: list[NodeFacts], usage: Mapping[str, Usage],
                spread: Mapping[str, int], total_nodes: int, *, strategy: str = "LeastAllocated",
                weights: Mapping[str, float] | None = None,
                fit_resources: Mapping[str, int] = DEFAULT_FIT_RESOURCES) -> dict[str, float]:
    """Weighted sum of the score plugins for each feasible node."""
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    empty = Usage()
    fit, balanced, image, affinity, taint = {}, {}, {}, {}, {}
    for n in candidates:
        u = usage.get(n.name, empty)
        fit[n.name] = resource_fit_score(pod, n, u, strategy, fit_resources) if w["NodeResourcesFit"] else 0
        balanced[n.name] = balanced_allocation_score(pod, n, u) if w["NodeResourcesBalancedAllocation"] else 0
        image[n.name] = image_locality_score(pod, n, spread, total_nodes) if w["ImageLocality"] else 0
        affinity[n.name] = node_affinity_raw_score(pod, n)
        taint[n.name] = taint_toleration_raw_score(pod, n)
    affinity, taint = default_normalize(affinity), default_normalize(taint, reverse=True)
    return {
        n.name: (w["NodeResourcesFit"] * fit[n.name]
                 + w["NodeResourcesBalancedAllocation"] * balanced[n.name]
                 + w["ImageLocality"] * image[n.name]
                 + w["NodeAffinity"] * affinity[n.name]
                 + w["TaintToleration"] * taint[n.name])
        for n in candidates
    }


def select_host(scores: Mapping[str, float]) -> str:
    """The highest score; ties go to the first name in order (upstream picks at random)."""
    return min(scores, key=lambda name: (-scores[name], name))
