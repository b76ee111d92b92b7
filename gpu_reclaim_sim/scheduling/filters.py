"""The filter plugins of the simulated kube-scheduler (v1.30 default profile), in the
upstream order — NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
NodeResourcesFit: the first plugin that fails gives the node's reasons — and the
FitError message. Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from jupyterhub_gpu_reclaim.spawner.kube import TAINT_UNSCHEDULABLE, match_node_selector_term, tolerates

from ..store import Obj
from .facts import BASIC_RESOURCES, NodeFacts, PodView, Usage

# reasons and messages, worded as upstream
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
MSG_NO_NODES = "no nodes available to schedule pods"


@dataclass(frozen=True)
class Status:
    """Why one node was rejected. `unresolvable`: preemption cannot change it."""

    reasons: tuple[str, ...]
    unresolvable: bool


def untolerated_taint(taints: Iterable[Obj], tolerations: list[Obj]) -> Obj | None:
    for t in taints:
        if not any(tolerates(tol, t) for tol in tolerations):
            return t
    return None


def matches_node_affinity(pod: PodView, node: NodeFacts) -> bool:
    """nodeSelector AND required node affinity (its nodeSelectorTerms ORed)."""
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return False
    if pod.required_terms is None:
        return True
    return any(match_node_selector_term(t, node.labels, node.name) for t in pod.required_terms)


def resource_fit(pod: PodView, node: NodeFacts, usage: Usage,
                 extra: tuple[dict[str, int], int] | None = None) -> list[str]:
    """NodeResourcesFit's fitsRequest; `extra` is (requests, pod count) of nominated pods."""
    extra_req, extra_pods = extra or ({}, 0)
    reasons = []
    if len(usage.pods) + extra_pods + 1 > node.allocatable.get("pods", 0):
        reasons.append(REASON_TOO_MANY_PODS)
    if not pod.requests:
        return reasons
    alloc, used = node.allocatable, usage.requested
    for r in BASIC_RESOURCES:
        q = pod.requests.get(r, 0)
        if q > 0 and q > alloc.get(r, 0) - used.get(r, 0) - extra_req.get(r, 0):
            reasons.append(f"Insufficient {r}")
    for r in sorted(pod.requests):
        if r in BASIC_RESOURCES or r == "pods":
            continue
        q = pod.requests[r]
        if q > 0 and q > alloc.get(r, 0) - used.get(r, 0) - extra_req.get(r, 0):
            reasons.append(f"Insufficient {r}")
    return reasons


def static_filter(pod: PodView, node: NodeFacts) -> Status | None:
    """The filters that do not depend on other pods, in upstream plugin order."""
    if node.unschedulable and not any(tolerates(t, TAINT_UNSCHEDULABLE) for t in pod.tolerations):
        return Status((REASON_UNSCHEDULABLE,), True)
    if pod.node_name and pod.node_name != node.name:
        return Status((REASON_NODE_NAME,), True)
    taint = untolerated_taint(node.hard_taints, pod.tolerations)
    if taint is not None:
        return Status((f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}",), True)
    if not matches_node_affinity(pod, node):
        return Status((REASON_NODE_AFFINITY,), True)
    return None


def filter_node(pod: PodView, node: NodeFacts, usage: Usage,
                extra: tuple[dict[str, int], int] | None = None) -> Status | None:
    """None when the pod fits the node, else the first failing plugin's reasons."""
    status = static_filter(pod, node)
    if status is not None:
        return status
    reasons = resource_fit(pod, node, usage, extra)
    return Status(tuple(reasons), False) if reasons else None


def fit_failures(pod: Obj, node: Obj, pods_on_node: Iterable[Obj] = ()) -> list[str]:
    """Why `pod` would not fit `node` holding `pods_on_node` ([] when it fits)."""
    status = filter_node(PodView.from_pod(pod), NodeFacts.from_node(node), Usage.of(pods_on_node))
    return [] if status is None else list(status.reasons)


# --- messages --------------------------------------------------------------------------


def fit_error_message(num_nodes: int, statuses: Iterable[Status], post_filter: str = "") -> str:
    """FitError.Error() of v1.30: reasons counted over nodes, `"<n> <reason>"` strings sorted."""
    counts = Counter(r for s in statuses for r in s.reasons)
    msg = f"0/{num_nodes} nodes are available:"
    parts = sorted(f"{n} {r}" for r, n in counts.items())
    if parts:
        msg += " " + ", ".join(parts) + "."
    if post_filter:
        msg += " " + post_filter
    return msg
