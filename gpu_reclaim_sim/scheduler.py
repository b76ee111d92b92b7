"""A kube-scheduler (v1.30 default profile) for the simulated cluster.

Pure part (no I/O, unit-tested): pod requests (`kube.pod_requests`, re-exported here
with `tolerates` and `match_node_selector_term`), the filter plugins NodeUnschedulable,
NodeName, TaintToleration, NodeAffinity and NodeResourcesFit in the upstream order (the
first plugin that fails gives the node's reasons), the score plugins NodeResourcesFit
(LeastAllocated/MostAllocated), NodeResourcesBalancedAllocation, ImageLocality,
NodeAffinity and TaintToleration with upstream integer arithmetic and normalisation,
DefaultPreemption's victim selection and node choice, and the FitError message.

`Scheduler` is the imperative shell: it follows pods and nodes through store watches,
keeps per-node usage incrementally (the scheduler cache), schedules pending pods one
pass at a time in priority order, binds them, preempts, and writes the PodScheduled
condition and the Scheduled / FailedScheduling / Preempted events in upstream words.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping

from jupyterhub_gpu_reclaim.kube import TAINT_UNSCHEDULABLE, match_node_selector_term, parse_quantity, pod_requests, tolerates
from . import errors
from .images import normalize
from .resources import BY_KIND
from .store import Filter, Obj
from jupyterhub_gpu_reclaim.timestamps import parse_time
from .timestamps import rfc3339

log = logging.getLogger("gpu_reclaim_sim.scheduler")

POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]
DEFAULT_SCHEDULER = "default-scheduler"
GPU = "nvidia.com/gpu"
BASIC_RESOURCES = ("cpu", "memory", "ephemeral-storage")
TERMINAL_PHASES = ("Succeeded", "Failed")

# scheduler/util: what a container with no cpu/memory request counts as when scoring
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
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

# reasons and messages, worded as upstream
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
REASON_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_NO_NODES = "no nodes available to schedule pods"
MSG_PREEMPTION_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
MSG_PREEMPTION_TERMINATING = "preemption: not eligible due to a terminating pod on the nominated node."
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


def _start_time(pod: Obj) -> float:
    """When the pod started (creation as a fallback), for MoreImportantPod's tie-break."""
    stamp = (pod.get("status") or {}).get("startTime") or pod["metadata"].get("creationTimestamp")
    try:
        return parse_time(stamp).timestamp() if stamp else math.inf
    except ValueError:
        return math.inf


def _terminating_by_preemption(pod: Obj) -> bool:
    if not pod["metadata"].get("deletionTimestamp"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget":
            return c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
    return False


# --- what the scheduler knows of a pod and of a node -------------------------------------


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


# --- filters ---------------------------------------------------------------------------


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


# --- scores ----------------------------------------------------------------------------


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


# --- preemption ------------------------------------------------------------------------


@dataclass
class PreemptionResult:
    node: str | None
    victims: list[PodView]
    statuses: dict[str, Status]  # per node, for the message when no node was found


StartOf = Callable[[str], float]  # pod uid -> start time (epoch seconds)


def _no_start(uid: str) -> float:
    return math.inf


def select_victims(pod: PodView, node: NodeFacts, usage: Usage,
                   extra: tuple[dict[str, int], int] | None = None,
                   start_of: StartOf = _no_start) -> tuple[list[PodView] | None, Status | None]:
    """SelectVictimsOnNode: remove every lower-priority pod; if the pod then fits, add them
    back from the most important (higher priority, then earlier start) down, keeping out
    only those it cannot fit beside. Victims come back most important first."""
    potential = [p for p in usage.pods.values() if p.priority < pod.priority]
    if not potential:
        return None, Status((REASON_NO_VICTIMS,), True)
    trial = usage.copy()
    for p in potential:
        trial.remove(p)
    reasons = resource_fit(pod, node, trial, extra)
    if reasons:
        return None, Status(tuple(reasons), False)
    victims = []
    for p in sorted(potential, key=lambda p: (-p.priority, start_of(p.uid))):
        trial.add(p)
        if resource_fit(pod, node, trial, extra):
            trial.remove(p)
            victims.append(p)
    return victims, None


def pick_preemption_node(candidates: dict[str, list[PodView]], start_of: StartOf = _no_start) -> str:
    """pickOneNodeForPreemption without PDBs: lowest highest-victim priority, then lowest
    sum of (offset) priorities, then fewest victims, then the latest start of the most
    important victims, then the first name."""
    def key(name: str) -> tuple:
        victims = candidates[name]
        top = max(v.priority for v in victims)
        earliest_top = min(start_of(v.uid) for v in victims if v.priority == top)
        return (top, sum(v.priority + 2**31 for v in victims), len(victims), -earliest_top, name)

    return min(candidates, key=key)


def find_preemption(pod: PodView, nodes: list[NodeFacts], usage: Mapping[str, Usage],
                    statuses: Mapping[str, Status],
                    nominated: Mapping[str, tuple[dict[str, int], int]] | None = None,
                    start_of: StartOf = _no_start) -> PreemptionResult:
    """DefaultPreemption's candidate search over nodes that failed only on resources."""
    out: dict[str, Status] = {}
    candidates: dict[str, list[PodView]] = {}
    for n in nodes:
        st = statuses.get(n.name)
        if st is None or st.unresolvable:
            out[n.name] = Status((REASON_PREEMPTION_NOT_HELPFUL,), True)
            continue
        victims, fail = select_victims(pod, n, usage.get(n.name, Usage()),
                                       (nominated or {}).get(n.name), start_of)
        if victims is None:
            out[n.name] = fail  # type: ignore[assignment]
        elif victims:
            candidates[n.name] = victims
        else:  # fits without victims: only a stale snapshot gets here
            out[n.name] = Status((f'expected at least one victim pod on node "{n.name}"',), False)
    if not candidates:
        return PreemptionResult(None, [], out)
    chosen = pick_preemption_node(candidates, start_of)
    return PreemptionResult(chosen, candidates[chosen], out)


# --- the scheduler ---------------------------------------------------------------------


@dataclass
class _PodRecord:
    view: PodView
    obj: Obj
    order: int  # when first seen: queue order among equal priorities
    generation: Any
    node: str | None = None  # node whose usage counts it
    nominated: str | None = None


def _condition(status: Obj, cond: Obj) -> None:
    """podutil.UpdatePodCondition: lastTransitionTime moves only when the status changes."""
    conds = status.setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            if c.get("status") == cond["status"] and c.get("lastTransitionTime"):
                cond["lastTransitionTime"] = c["lastTransitionTime"]
            conds[i] = {**c, **cond}
            return
    conds.append(cond)


class Scheduler:
    """Schedules pods whose schedulerName is one of `names` onto the store's nodes."""

    YIELD_AFTER = 0.02  # seconds of scheduling before letting the API server answer

    def __init__(self, cluster: Any, *, names: Iterable[str] = (DEFAULT_SCHEDULER,),
                 fit_resources: Mapping[str, int] = DEFAULT_FIT_RESOURCES) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.events = cluster.events
        scenario = cluster.scenario
        self.strategy: str = getattr(scenario, "scoring_strategy", "LeastAllocated")
        self.weights: dict[str, float] = dict(getattr(scenario, "scheduler_weights", {}) or {})
        self.retry_interval: float = float(getattr(scenario, "scheduler_retry_interval", 10.0))
        self.names = set(names)
        self.fit_resources = dict(fit_resources)
        self._pods: dict[str, _PodRecord] = {}
        self._pending: dict[str, _PodRecord] = {}
        self._nominated: dict[str, _PodRecord] = {}  # pending pods with a nominatedNodeName
        self._unschedulable: set[str] = set()
        self._nodes: dict[str, NodeFacts] = {}
        self._node_order: list[str] | None = None
        self._spread: Counter[str] | None = None
        self._usage: dict[str, Usage] = {}
        self._counter = 0
        self._flush = False
        self._wake = asyncio.Event()
        self._watches: list[Any] = []
        self._tasks: list[asyncio.Task] = []
        self.passes = 0  # for tests and benchmarks

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        for rtype in (NODE, POD):
            w = self.store.watch(Filter(rtype))
            self._watches.append(w)
        self._drain()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump(w)) for w in self._watches]
        self._tasks.append(loop.create_task(self._run()))
        self._wake.set()

    async def stop(self) -> None:
        for w in self._watches:
            w.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks, self._watches = [], []

    def kick(self) -> None:
        """Request a scheduling pass soon, retrying unschedulable pods too."""
        self._flush = True
        self._wake.set()

    # --- following the store ---------------------------------------------------------

    async def _pump(self, watch: Any) -> None:
        handled = 0
        while True:
            item = await watch.queue.get()  # returns at once while the queue holds items
            if item is None:
                return
            self._apply(watch.filter.rtype, *item)
            handled += 1
            if handled % 256 == 0:
                await asyncio.sleep(0)  # a burst of thousands of pods must not stall the API server

    def _drain(self) -> None:
        """Apply every change already queued, so the cache equals the store right now."""
        for w in self._watches:
            while True:
                try:
                    item = w.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if item is None:
                    break
                self._apply(w.filter.rtype, *item)

    def _apply(self, rtype: Any, type_: str, obj: Obj) -> None:
        try:
            if rtype is NODE:
                self._apply_node(type_, obj)
            else:
                self._apply_pod(type_, obj)
        except Exception:  # one malformed object must not stop scheduling
            log.exception("scheduler: cannot follow %s %s", rtype.kind, obj["metadata"].get("name"))

    def _apply_node(self, type_: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        old = self._nodes.get(name)
        if type_ == "DELETED":
            if old is not None:
                del self._nodes[name]
                self._node_order = self._spread = None
            return
        facts = NodeFacts.from_node(node)
        self._nodes[name] = facts
        if old is None:
            self._node_order = None
        if old is None or old.images != facts.images:
            self._spread = None
        if old is None or old.key != facts.key:
            self._request_flush()

    def _apply_pod(self, type_: str, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        rec = self._pods.get(uid)
        if type_ == "DELETED":
            if rec is not None:
                freed = rec.node is not None
                self._forget(rec)
                if freed:
                    self._request_flush()
            return
        if rec is None:
            self._counter += 1
            rec = self._pods[uid] = _PodRecord(PodView.from_pod(pod), pod, self._counter, meta.get("generation"))
        elif rec.generation != meta.get("generation"):
            # a pending pod's spec changed (e.g. tolerations added): reconsider it at once
            self._account(rec, None)
            rec.view, rec.generation = PodView.from_pod(pod), meta.get("generation")
            self._unschedulable.discard(uid)
        rec.obj = pod
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        self._nominate(rec, status.get("nominatedNodeName") or None)
        node = spec.get("nodeName") if not is_terminal(pod) else None
        if rec.node and node != rec.node:
            self._request_flush()  # resources freed: a finished pod
        self._account(rec, node)
        pending = (not spec.get("nodeName") and not is_terminal(pod) and not meta.get("deletionTimestamp")
                   and (spec.get("schedulerName") or DEFAULT_SCHEDULER) in self.names
                   and not spec.get("schedulingGates"))
        if pending:
            if uid not in self._pending:
                self._pending[uid] = rec
                self._wake.set()
        else:
            self._pending.pop(uid, None)
            self._nominated.pop(uid, None)
            self._unschedulable.discard(uid)

    def _account(self, rec: _PodRecord, node: str | None) -> None:
        if rec.node == node:
            return
        if rec.node:
            self._usage[rec.node].remove(rec.view)
        if node:
            self._usage.setdefault(node, Usage()).add(rec.view)
        rec.node = node

    def _forget(self, rec: _PodRecord) -> None:
        self._account(rec, None)
        uid = rec.view.uid
        self._pods.pop(uid, None)
        self._pending.pop(uid, None)
        self._nominated.pop(uid, None)
        self._unschedulable.discard(uid)

    def _nominate(self, rec: _PodRecord, node: str | None) -> None:
        rec.nominated = node
        if node:
            self._nominated[rec.view.uid] = rec
        else:
            self._nominated.pop(rec.view.uid, None)

    def _request_flush(self) -> None:
        if self._unschedulable:
            self._flush = True
            self._wake.set()

    # --- the loop --------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_retry = loop.time() + self.retry_interval
        while True:
            # a timer rather than wait_for: no inner task that could swallow a cancellation
            timer = loop.call_later(max(0.0, next_retry - loop.time()), self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            self._wake.clear()
            if loop.time() >= next_retry:
                next_retry = loop.time() + self.retry_interval
                if self._unschedulable:
                    self._flush = True
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler: pass failed")

    async def run_pass(self) -> None:
        """Try every pod due for an attempt, highest priority first."""
        self._drain()
        flush, self._flush = self._flush, False
        due = [r for uid, r in self._pending.items() if flush or uid not in self._unschedulable]
        if not due:
            return
        self.passes += 1
        due.sort(key=lambda r: (-r.view.priority, r.order))
        failures: dict[str, tuple[str, str | None]] = {}  # signature -> (message, nomination)
        clock = asyncio.get_running_loop().time
        slice_end = clock() + self.YIELD_AFTER
        for rec in due:
            if clock() >= slice_end:
                await asyncio.sleep(0)
                self._drain()  # the world moved on meanwhile: see it before going on
                failures.clear()
                slice_end = clock() + self.YIELD_AFTER
            if self._pending.get(rec.view.uid) is not rec:
                continue
            try:
                self._schedule_one(rec, failures)
            except errors.ApiError as e:  # the pod went away under us
                log.debug("scheduler: %s/%s: %s", rec.view.namespace, rec.view.name, e.message)

    # --- one pod ---------------------------------------------------------------------

    def _sorted_nodes(self) -> list[NodeFacts]:
        if self._node_order is None:
            self._node_order = sorted(self._nodes)
        return [self._nodes[n] for n in self._node_order]

    def _nominated_extra(self, pod: PodView) -> dict[str, tuple[dict[str, int], int]]:
        """Per node, what pods nominated there with priority >= this pod's will take."""
        out: dict[str, tuple[dict[str, int], int]] = {}
        for r in self._nominated.values():
            if (not r.nominated or r.view.uid == pod.uid or r.view.priority < pod.priority
                    or r.view.uid not in self._pending):
                continue
            req, count = out.get(r.nominated, ({}, 0))
            req = dict(req)
            for k, v in r.view.requests.items():
                req[k] = req.get(k, 0) + v
            out[r.nominated] = (req, count + 1)
        return out

    def _schedule_one(self, rec: _PodRecord, failures: dict[str, tuple[str, str | None]]) -> None:
        pod = rec.view
        nodes = self._sorted_nodes()
        if not nodes:
            self._fail(rec, MSG_NO_NODES, "")
            return
        cache_key = f"{pod.signature}|{rec.nominated}"
        if cache_key in failures:
            self._fail(rec, *failures[cache_key])
            return
        nominated = self._nominated_extra(pod) if self._nominated else {}
        empty = Usage()
        if rec.nominated and rec.nominated in self._nodes:
            n = self._nodes[rec.nominated]
            if filter_node(pod, n, self._usage.get(n.name, empty), nominated.get(n.name)) is None:
                self._bind(rec, n.name)
                return
        statuses: dict[str, Status] = {}
        feasible: list[NodeFacts] = []
        for n in nodes:
            st = filter_node(pod, n, self._usage.get(n.name, empty), nominated.get(n.name))
            if st is None:
                feasible.append(n)
            else:
                statuses[n.name] = st
        if feasible:
            if len(feasible) == 1:
                self._bind(rec, feasible[0].name)
                return
            if self._spread is None:
                self._spread = image_spread(nodes)
            scores = score_nodes(pod, feasible, self._usage, self._spread, len(nodes),
                                 strategy=self.strategy, weights=self.weights,
                                 fit_resources=self.fit_resources)
            self._bind(rec, select_host(scores))
            return
        message, nomination, preempted = self._post_filter(rec, nodes, statuses, nominated)
        message = fit_error_message(len(nodes), statuses.values(), message)
        if preempted:
            failures.clear()  # victims and nominations changed what later pods see
        else:
            failures[cache_key] = (message, nomination)
        self._fail(rec, message, nomination)

    def _post_filter(self, rec: _PodRecord, nodes: list[NodeFacts], statuses: dict[str, Status],
                     nominated: dict[str, tuple[dict[str, int], int]]) -> tuple[str, str | None, bool]:
        """DefaultPreemption: (message, nomination: node, "" to clear or None to keep, preempted?)."""
        pod = rec.view
        if pod.preemption_policy == "Never":
            return MSG_PREEMPTION_NEVER, None, False
        nom = rec.nominated
        if nom and nom in self._nodes and not (statuses.get(nom) and statuses[nom].unresolvable):
            for p in self._usage.get(nom, Usage()).pods.values():
                other = self._pods.get(p.uid)
                if p.priority < pod.priority and other and _terminating_by_preemption(other.obj):
                    return MSG_PREEMPTION_TERMINATING, None, False
        def start_of(uid: str) -> float:
            r = self._pods.get(uid)
            return _start_time(r.obj) if r else math.inf

        result = find_preemption(pod, nodes, self._usage, statuses, nominated, start_of)
        if result.node is None:
            post = "preemption: " + fit_error_message(len(result.statuses), result.statuses.values())
            return post, "", False
        self._evict(rec, result.node, result.victims)
        return "", result.node, True

    def _evict(self, rec: _PodRecord, node: str, victims: list[PodView]) -> None:
        preemptor = rec.view
        component = preemptor.scheduler_name

        def disrupted(o: Obj) -> None:
            _condition(o.setdefault("status", {}), {
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": f"{component}: preempting to accommodate a higher priority pod",
                "lastProbeTime": None, "lastTransitionTime": rfc3339()})

        for v in victims:
            current = self.store.find(POD, v.namespace, v.name)
            if current is None or current["metadata"]["uid"] != v.uid:
                continue
            marked = self.store.update(POD, v.namespace, v.name, disrupted)
            if (r := self._pods.get(v.uid)) is not None:
                r.obj = marked
            try:
                self.store.delete(POD, v.namespace, v.name)  # the victim's own grace period
            except errors.ApiError:
                pass
            self.events.record(marked, "Preempted", f"Preempted by pod {preemptor.uid} on node {node}",
                               component=component)
            log.info("scheduler: %s/%s preempted by %s/%s on %s", v.namespace, v.name,
                     preemptor.namespace, preemptor.name, node)
        # lower-priority pods nominated to that node may no longer fit there
        for other in list(self._nominated.values()):
            if other.nominated == node and other.view.priority < preemptor.priority:
                self._nominate(other, None)
                try:
                    self.store.update(POD, other.view.namespace, other.view.name,
                                      lambda o: (o.get("status") or {}).pop("nominatedNodeName", None))
                except errors.ApiError:
                    pass

    # --- writing results -------------------------------------------------------------

    def _current(self, rec: _PodRecord) -> Obj | None:
        obj = self.store.find(POD, rec.view.namespace, rec.view.name)
        if obj is None or obj["metadata"]["uid"] != rec.view.uid:
            return None
        return obj

    def _bind(self, rec: _PodRecord, node: str) -> None:
        pod = rec.view
        current = self._current(rec)
        if (current is None or (current.get("spec") or {}).get("nodeName")
                or current["metadata"].get("deletionTimestamp")):
            return
        if self.store.find(NODE, None, node) is None:
            self._wake.set()  # the node went while we looked: try again with fresh facts
            return

        def bind(o: Obj) -> None:
            o["spec"]["nodeName"] = node
            _condition(o.setdefault("status", {}), {
                "type": "PodScheduled", "status": "True", "lastProbeTime": None,
                "lastTransitionTime": rfc3339()})
            for c in o["status"]["conditions"]:
                if c.get("type") == "PodScheduled":
                    c.pop("reason", None)
                    c.pop("message", None)

        bound = self.store.update(POD, pod.namespace, pod.name, bind)
        rec.obj = bound
        self._account(rec, node)
        self._pending.pop(pod.uid, None)
        self._nominated.pop(pod.uid, None)
        self._unschedulable.discard(pod.uid)
        self.events.record(bound, "Scheduled", f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
                           component=pod.scheduler_name)
        log.debug("scheduler: bound %s/%s to %s", pod.namespace, pod.name, node)

    def _fail(self, rec: _PodRecord, message: str, nomination: str | None) -> None:
        pod = rec.view
        if self._current(rec) is None:
            return

        def mark(o: Obj) -> None:
            status = o.setdefault("status", {})
            _condition(status, {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                "lastTransitionTime": rfc3339(), "reason": "Unschedulable",
                                "message": message})
            if nomination:
                status["nominatedNodeName"] = nomination
            elif nomination == "":
                status.pop("nominatedNodeName", None)

        updated = self.store.update(POD, pod.namespace, pod.name, mark)
        rec.obj = updated
        if nomination is not None:
            self._nominate(rec, nomination or None)
        self._unschedulable.add(pod.uid)
        self.events.record(updated, "FailedScheduling", message, type_="Warning", component=pod.scheduler_name)
