"""What the simulated kube-scheduler knows of a pod and of a node: `PodView` (requests
in scheduler units, affinity, tolerations, images), `NodeFacts` (allocatable, taints,
images), `Usage` (the scheduler cache's per-node sums) and `snapshot`. Pure, no I/O."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Mapping

from jupyterhub_gpu_reclaim.spawner.kube import parse_quantity, pod_requests
from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..images import normalize
from ..store import Obj

DEFAULT_SCHEDULER = "default-scheduler"
BASIC_RESOURCES = ("cpu", "memory", "ephemeral-storage")
TERMINAL_PHASES = ("Succeeded", "Failed")

# scheduler/util: what a container with no cpu/memory request counts as when scoring
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"


# --- requests ------------------------------------------------------------------------

def to_units(resource: str, value: Fraction) -> int:
    """Integers as the scheduler compares them: millicores for cpu, else whole units (rounded up)."""
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)


def _units(reqs: Mapping[str, Fraction]) -> dict[str, int]:
    return {k: u for k, v in reqs.items() if (u := to_units(k, v)) > 0}


_NON_ZERO = {"cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000), "memory": Fraction(DEFAULT_MEMORY_REQUEST)}


def pod_priority(pod: Obj) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def start_time(pod: Obj) -> float:
    """When the pod started (creation as a fallback), for MoreImportantPod's tie-break."""
    stamp = (pod.get("status") or {}).get("startTime") or pod["metadata"].get("creationTimestamp")
    try:
        started = parse_time(stamp)
    except ValueError:
        return math.inf
    return started.timestamp() if started is not None else math.inf


def terminating_by_preemption(pod: Obj) -> bool:
    if not pod["metadata"].get("deletionTimestamp"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget":
            return c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
    return False


@dataclass
class PodView:
    """The scheduling-relevant facts of one pod, computed once per pod spec."""

    uid: str
    namespace: str
    name: str
    priority: int
    preemption_policy: str
    requests: dict[str, int]  # scheduler units, zero entries dropped
    nonzero_cpu: int  # millicores, missing requests counted as 100m (scoring)
    nonzero_memory: int  # bytes, missing requests counted as 200Mi (scoring)
    node_name: str
    node_selector: dict[str, str]
    required_terms: list[Obj] | None  # None: no required node affinity
    preferred_terms: list[tuple[int, Obj]]
    tolerations: list[Obj]
    images: list[str]  # normalised, init containers and containers
    num_containers: int
    scheduler_name: str
    signature: str  # equal for pods the filters cannot tell apart

    @classmethod
    def from_pod(cls, pod: Obj) -> "PodView":
        meta, spec = pod["metadata"], pod.get("spec") or {}
        nonzero = pod_requests(pod, non_missing=_NON_ZERO)
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        preferred = [
            (int(t.get("weight") or 0), t.get("preference") or {})
            for t in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
        requests = _units(pod_requests(pod))
        view = cls(
            uid=meta.get("uid") or "",
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            priority=pod_priority(pod),
            preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
            requests=requests,
            nonzero_cpu=to_units("cpu", nonzero.get("cpu", Fraction(0))),
            nonzero_memory=to_units("memory", nonzero.get("memory", Fraction(0))),
            node_name=spec.get("nodeName") or "",
            node_selector=dict(spec.get("nodeSelector") or {}),
            required_terms=None if required is None else list(required.get("nodeSelectorTerms") or []),
            preferred_terms=preferred,
            tolerations=list(spec.get("tolerations") or []),
            images=[normalize(c["image"]) for c in containers if c.get("image")],
            num_containers=len(containers),
            scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER,
            signature="",
        )
        view.signature = json.dumps(
            [sorted(requests.items()), view.priority, view.preemption_policy, view.node_name,
             view.node_selector, required, view.tolerations], sort_keys=True, default=str)
        return view


@dataclass
class NodeFacts:
    """The scheduling-relevant facts of one Node object."""

    name: str
    labels: dict[str, str]
    unschedulable: bool
    hard_taints: list[Obj]  # NoSchedule and NoExecute, in the node's order
    soft_taints: list[Obj]  # PreferNoSchedule
    allocatable: dict[str, int]  # scheduler units; "pods" is a count
    images: dict[str, int]  # normalised image name -> size in bytes
    key: str = ""  # changes when anything a filter reads changes

    @classmethod
    def from_node(cls, node: Obj) -> "NodeFacts":
        meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
        raw = status.get("allocatable") or status.get("capacity") or {}
        allocatable = {}
        for k, v in raw.items():
            try:
                allocatable[k] = to_units(k, parse_quantity(v))
            except (ValueError, TypeError):
                continue
        taints = [dict(t) for t in spec.get("taints") or []]
        implied = _implied_readiness_taint(status)
        if implied and not any(t.get("key") == implied["key"] and t.get("effect") == implied["effect"]
                               for t in taints):
            taints.append(implied)
        images: dict[str, int] = {}
        for img in status.get("images") or []:
            for n in img.get("names") or []:
                images[normalize(n)] = int(img.get("sizeBytes") or 0)
        facts = cls(
            name=meta["name"],
            labels=dict(meta.get("labels") or {}),
            unschedulable=bool(spec.get("unschedulable")),
            hard_taints=[t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")],
            soft_taints=[t for t in taints if t.get("effect") == "PreferNoSchedule"],
            allocatable=allocatable,
            images=images,
        )
        facts.key = json.dumps([facts.labels, facts.unschedulable, facts.hard_taints,
                                facts.soft_taints, facts.allocatable], sort_keys=True)
        return facts


def _implied_readiness_taint(status: Obj) -> Obj | None:
    """The taint the node lifecycle controller puts on a node that is not Ready."""
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "True":
        return None
    key = TAINT_UNREACHABLE if ready is not None and ready.get("status") == "Unknown" else TAINT_NOT_READY
    return {"key": key, "effect": "NoSchedule"}


@dataclass
class Usage:
    """What the pods bound to one node request (the scheduler cache's NodeInfo sums)."""

    requested: dict[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    pods: dict[str, PodView] = field(default_factory=dict)  # uid -> pod

    def add(self, pod: PodView) -> None:
        if pod.uid in self.pods:
            return
        self.pods[pod.uid] = pod
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        self.nonzero_cpu += pod.nonzero_cpu
        self.nonzero_memory += pod.nonzero_memory

    def remove(self, pod: PodView) -> None:
        if self.pods.pop(pod.uid, None) is None:
            return
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        self.nonzero_cpu -= pod.nonzero_cpu
        self.nonzero_memory -= pod.nonzero_memory

    def copy(self) -> "Usage":
        return Usage(dict(self.requested), self.nonzero_cpu, self.nonzero_memory, dict(self.pods))

    @classmethod
    def of(cls, pods: Iterable[Obj]) -> "Usage":
        """Usage of pods bound to a node: finished (Succeeded/Failed) pods do not count,
        terminating ones do, as in the real scheduler cache."""
        u = cls()
        for p in pods:
            if not is_terminal(p):
                u.add(PodView.from_pod(p))
        return u


def snapshot(nodes: Iterable[Obj], pods: Iterable[Obj],
             view_of: Callable[[Obj], PodView] = PodView.from_pod) -> tuple[dict[str, NodeFacts], dict[str, Usage]]:
    """Facts of every node and the usage of every node name pods are bound to."""
    facts = {n["metadata"]["name"]: NodeFacts.from_node(n) for n in nodes}
    usage: dict[str, Usage] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and not is_terminal(p):
            usage.setdefault(node, Usage()).add(view_of(p))
    return facts, usage
