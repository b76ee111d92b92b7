"""Whether a pod would fit a node, as far as the cluster autoscaler (sim.nodeagent.clusterautoscaler)
needs to know before it adds one: the scheduler's filters that a node group's template node
decides — NodeResourcesFit (the pod's effective requests and one pod against what the
node's allocatable leaves), TaintToleration (NoSchedule and NoExecute taints) and
NodeAffinity (`nodeSelector` and required node affinity). The reasons are the scheduler's
words ("Insufficient nvidia.com/gpu"), which cluster-autoscaler repeats in its
NotTriggerScaleUp events. Placement itself is the real kube-scheduler's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from ..api.nodeaffinity import match_node_selector_term
from ..api.quantity import parse
from ..api.requests import pod_requests
from ..api.taints import tolerates

Obj = dict[str, Any]

MISMATCH = "node(s) didn't match Pod's node affinity/selector"


@dataclass
class Usage:
    """What the pods on a node request, "pods" (their count) included."""
    requested: Counter[str] = field(default_factory=Counter)

    def add(self, pod: Obj) -> None:
        self.requested.update({**pod_requests(pod), "pods": Fraction(1)})

    def copy(self) -> "Usage":
        return Usage(Counter(self.requested))


def _matches_affinity(pod: Obj, labels: Mapping[str, str], name: str) -> bool:
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(match_node_selector_term(t, labels, name) for t in required.get("nodeSelectorTerms") or [])


def misfit(pod: Obj, node: Obj, usage: Usage) -> list[str]:
    """Why `pod` does not fit `node` with `usage` already on it, in the scheduler's words;
    empty when it fits."""
    meta, spec = node["metadata"], node.get("spec") or {}
    if not _matches_affinity(pod, meta.get("labels") or {}, meta["name"]):
        return [MISMATCH]
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations):
            return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    allocatable = {k: parse(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
    wanted = {**{k: v for k, v in pod_requests(pod).items() if v > 0}, "pods": Fraction(1)}
    return ["Too many pods" if name == "pods" else f"Insufficient {name}" for name, amount in sorted(wanted.items())
            if usage.requested[name] + amount > allocatable.get(name, Fraction(0))]
