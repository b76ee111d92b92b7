"""Image-locality node affinity without a custom scheduler.

Pure functions and data (no I/O): an index image → nodes built from node `status.images`,
a capacity check that counts what preemption of lower-priority pods (z2jh user
placeholders) would free, the choice between `off` / `prefer` / `require`, and the
merge of the resulting terms into KubeSpawner's `node_affinity_required` /
`node_affinity_preferred` trait values (camelCase dicts, as KubeSpawner accepts them).

Kubernetes semantics shared with the simulated cluster's scheduler (quantities, pod
requests, taint toleration, node-selector matching) live in `jupyterhub_gpu_reclaim.signals.kube`.
Kubernetes rules this module relies on (checked against
kubernetes/kubernetes pkg/apis/core/validation/validation.go):

* `ValidateNodeFieldSelectorRequirement`: a `matchFields` requirement takes operator
  `In` or `NotIn` with exactly one value ("must be only one value when `operator` is 'In'
  or 'NotIn' for node field selector"), and `metadata.name` is the only valid key. So
  "node in {a, b}" is two terms, one `metadata.name In [x]` each, never `In [a, b]`.
* `ValidatePreferredSchedulingTerms` validates each `preference` with the same
  `ValidateNodeSelectorTerm` as required terms, so `matchFields` is allowed in preferred
  terms too (same one-value rule); `weight` must be in 1-100.
* `nodeSelectorTerms` are ORed, the requirements inside one term ANDed, and an empty
  term matches no node.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Literal, Mapping, Sequence

from ..signals import kube
from ..signals.kube import (
    NODE_NAME_FIELD,
    TAINT_UNSCHEDULABLE,
    match_field,
    match_node_selector_term,
    parse_quantity,
    tolerates,
)
from .images import normalize

Obj = dict[str, Any]
Mode = Literal["off", "prefer", "require", "auto"]
ModeUsed = Literal["off", "prefer", "require"]
MODES: tuple[str, ...] = ("off", "prefer", "require", "auto")

# At most this many nodes are named in added affinity terms. Every added required term is
# (existing term × node), and the scheduler evaluates every term against every node in
# each cycle, so naming all of a 1000-node cluster's holders would bloat the pod spec and
# slow filtering for little gain: 100 holders (those with room first) leave the scheduler
# plenty of choice. Nodes beyond the cap are simply not named.
MAX_AFFINITY_NODES = 100
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# --- quantities and requests (signals/kube.py) ----------------------------------------------------


def pod_requests(pod: Obj) -> dict[str, Fraction]:
    """What the scheduler charges a pod (`kube.pod_requests`, limits copied into missing
    requests as the apiserver's defaulting does). Takes a pod or just its spec (JSON form);
    an unparseable quantity counts as absent rather than failing the spawn (the apiserver
    will reject the pod itself)."""
    return kube.pod_requests(pod, skip_invalid=True)


_charged = pod_requests  # for functions whose `pod_requests` parameter shadows the name


# --- image index --------------------------------------------------------------------------


def node_images(node: Obj) -> dict[str, int]:
    """Normalised image name → size for every name in the node's `status.images`. Each
    entry lists both `repo:tag` and `repo@sha256:…`, so either spelling in a pod matches.
    (The kubelet reports at most 50 images per node by default, the largest first, so a
    small image on a busy node can be missing: that only costs a preference.)"""
    out: dict[str, int] = {}
    for img in (node.get("status") or {}).get("images") or []:
        size = int(img.get("sizeBytes") or 0)
        for name in img.get("names") or []:
            if name:
                out[normalize(name)] = size
    return out


class ImageIndex:
    """image → nodes holding it, kept by a node reflector's events (JSON node dicts).

    Both directions are stored so an update costs O(images on that node) and a lookup
    O(holders), whatever the cluster size (1000 nodes × 50 images is 50k entries)."""

    def __init__(self) -> None:
        self._holders: dict[str, dict[str, int]] = {}  # image -> node -> sizeBytes
        self._images: dict[str, dict[str, int]] = {}  # node -> image -> sizeBytes

    def update(self, node: Obj) -> None:
        """Add or replace one node (ADDED / MODIFIED events, or a relist)."""
        name = node["metadata"]["name"]
        new = node_images(node)
        old = self._images.get(name, {})
        if new == old and name in self._images:
            return  # most node updates are heartbeats: nothing about images changed
        for image in old.keys() - new.keys():
            self._drop(image, name)
        for image, size in new.items():
            self._holders.setdefault(image, {})[name] = size
        self._images[name] = new

    def remove(self, name: str) -> None:
        """Forget a node (DELETED events)."""
        for image in self._images.pop(name, {}):
            self._drop(image, name)

    def replace(self, nodes: Iterable[Obj]) -> None:
        """Reset to exactly these nodes (after a relist)."""
        nodes = list(nodes)
        keep = {n["metadata"]["name"] for n in nodes}
        for name in list(self._images.keys() - keep):
            self.remove(name)
        for n in nodes:
            self.update(n)

    def _drop(self, image: str, node: str) -> None:
        holders = self._holders.get(image)
        if holders is not None:
            holders.pop(node, None)
            if not holders:
                del self._holders[image]

    def nodes_with(self, image: str) -> set[str]:
        """Names of the nodes whose runtime reports the image (any spelling of it)."""
        return set(self._holders.get(normalize(image), ()))

    def size_of(self, image: str) -> int | None:
        """The image's sizeBytes as a node reports it; None when no node holds it."""
        holders = self._holders.get(normalize(image))
        return max(holders.values()) if holders else None

    def nodes(self) -> set[str]:
        return set(self._images)

    def __len__(self) -> int:
        return len(self._images)


# --- node matching ------------------------------------------------------------------------

def matches_node(node: Obj, node_selector: Mapping[str, str] | None = None,
                 required_terms: Sequence[Obj] | None = None) -> bool:
    """nodeSelector AND required node affinity (terms ORed). No terms (None or [], which
    is how KubeSpawner spells "no required affinity") constrain nothing."""
    meta = node.get("metadata") or {}
    labels, name = meta.get("labels") or {}, meta.get("name", "")
    if any(labels.get(k) != v for k, v in (node_selector or {}).items()):
        return False
    return not required_terms or any(match_node_selector_term(t, labels, name) for t in required_terms)


def is_ready(node: Obj) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


# --- capacity -----------------------------------------------------------------------------


def static_reason(node: Obj, tolerations: Sequence[Obj] = (),
                  node_selector: Mapping[str, str] | None = None,
                  required_terms: Sequence[Obj] | None = None) -> str | None:
    """Why the pod may never go to the node whatever it frees (cordon, taints, selector,
    required affinity), or None. Holders failing this must not be required: the merged
    terms would match nothing and the pod would wait forever."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not any(tolerates(t, TAINT_UNSCHEDULABLE) for t in tolerations):
        return "unschedulable (cordoned)"
    for taint in spec.get("taints") or []:
        hard = taint.get("effect") in ("NoSchedule", "NoExecute")
        if hard and not any(tolerates(t, taint) for t in tolerations):
            return f"untolerated taint {taint.get('key', '')}={taint.get('value', '')}:{taint.get('effect')}"
    if not matches_node(node, node_selector, required_terms):
        return "node selector / required affinity does not match"
    return None


def unfit_reason(node: Obj, pod_requests: Mapping[str, str | int | float | Fraction], pod_priority: int,
                 pods_on_node: Iterable[Obj], tolerations: Sequence[Obj] = (),
                 node_selector: Mapping[str, str] | None = None,
                 required_terms: Sequence[Obj] | None = None, *, can_preempt: bool = True) -> str | None:
    """Why the node cannot take the pod now, or None when it can.

    `pods_on_node` are the pods bound to this node. Pods of lower priority than ours do not
    count against the node when `can_preempt` (the pod's preemptionPolicy is not Never):
    the scheduler would preempt them, which is exactly what z2jh's user placeholders
    (priority -10 vs. users' 0) are for. Pods of equal or higher priority always count."""
    if not is_ready(node):
        return "not Ready"
    reason = static_reason(node, tolerations, node_selector, required_terms)
    if reason:
        return reason
    status = node.get("status") or {}
    allocatable = kube.resource_list(status.get("allocatable") or status.get("capacity"), skip_invalid=True)
    used: dict[str, Fraction] = {}
    count = 0
    for p in pods_on_node:
        if (p.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        if can_preempt and int((p.get("spec") or {}).get("priority") or 0) < pod_priority:
            continue
        count += 1
        for k, v in _charged(p).items():
            used[k] = used.get(k, Fraction(0)) + v
    if "pods" in allocatable and count + 1 > allocatable["pods"]:
        return "too many pods"
    for k, raw in sorted(pod_requests.items()):
        want = parse_quantity(raw)
        if want > 0 and want > allocatable.get(k, Fraction(0)) - used.get(k, Fraction(0)):
            return f"insufficient {k}"
    return None


def can_take(node: Obj, pod_requests: Mapping[str, str | int | float | Fraction], pod_priority: int,
             pods_on_node: Iterable[Obj], tolerations: Sequence[Obj] = (),
             node_selector: Mapping[str, str] | None = None,
             required_terms: Sequence[Obj] | None = None, *, can_preempt: bool = True) -> bool:
    """Whether the node could take the pod now, counting room preemption would free."""
    return unfit_reason(node, pod_requests, pod_priority, pods_on_node, tolerations,
                        node_selector, required_terms, can_preempt=can_preempt) is None


def candidates_and_fits(holders: Iterable[str], nodes: Mapping[str, Obj],
                        pods_by_node: Mapping[str, Sequence[Obj]],
                        pod_requests: Mapping[str, str | int | float | Fraction], pod_priority: int,
                        tolerations: Sequence[Obj] = (), node_selector: Mapping[str, str] | None = None,
                        required_terms: Sequence[Obj] | None = None, *,
                        can_preempt: bool = True) -> tuple[list[str], list[str]]:
    """(candidates, fits) for choose_mode: holders the pod may ever use (known nodes
    passing static_reason), and those of them that can take it now."""
    candidates, fits = [], []
    for name in sorted(set(holders)):
        node = nodes.get(name)
        if node is None or static_reason(node, tolerations, node_selector, required_terms):
            continue
        candidates.append(name)
        if can_take(node, pod_requests, pod_priority, pods_by_node.get(name, ()), tolerations,
                    node_selector, required_terms, can_preempt=can_preempt):
            fits.append(name)
    return candidates, fits


# --- the decision -------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What to do for one spawn. `code` is a short, fixed label for metrics (the free-text
    `reason` is for logs); `nodes` are the nodes to name in the terms, those with room
    first, at most MAX_AFFINITY_NODES."""

    mode_used: ModeUsed
    reason: str
    code: str = ""
    requested: str = ""
    nodes: tuple[str, ...] = field(default=())

    @property
    def mode(self) -> ModeUsed:
        return self.mode_used


def _ordered(candidates: Iterable[str], fits: Iterable[str], cap: int) -> tuple[str, ...]:
    # nodes with room first so the cap never drops the nodes that can take the pod now
    holders = set(candidates)
    first = sorted(set(fits) & holders)
    rest = sorted(holders - set(first))
    return tuple((first + rest)[:cap])


def choose_mode(mode: str, candidates: Iterable[str], fits: Iterable[str],
                max_nodes: int = MAX_AFFINITY_NODES) -> Decision:
    """Pick the affinity for one spawn. `candidates`: holders of the image the pod may use
    at all (see candidates_and_fits); `fits`: those that can take it now.

    * `off`: nothing.
    * no node holds the image: `off` whatever the mode. Requiring an empty set would leave
      the pod unschedulable forever, and there is nothing to prefer, so `require` falls
      back too (code `no_holder`; callers log it).
    * `prefer`: preferred affinity towards the holders.
    * `require`: required affinity to the holders, even when none has room right now: the
      operator chose "never pull on spawn", so the pod waits for room (and KubeSpawner's
      start_timeout bounds the wait) rather than silently going to a cold node.
    * `auto`: require when at least one holder can take the pod (counting preemptible
      lower-priority pods), else prefer, so a new or crowded image never strands a pod.
    """
    if mode not in MODES:
        raise ValueError(f"image affinity mode must be one of {', '.join(MODES)}, not {mode!r}")
    holders = set(candidates)
    room = sorted(set(fits) & holders)
    if mode == "off":
        return Decision("off", "image affinity is off", "disabled", mode)
    if not holders:
        return Decision("off", "no node holds the image", "no_holder", mode)
    nodes = _ordered(holders, room, max_nodes)
    summary = f"{len(holders)} node(s) hold the image, {len(room)} can take the pod"
    if mode == "prefer":
        return Decision("prefer", summary, "configured", mode, nodes)
    if mode == "require":
        return Decision("require", summary, "configured" if room else "configured_no_room", mode, nodes)
    if room:
        return Decision("require", summary, "holder_fits", mode, nodes)
    return Decision("prefer", summary + "; preferring so the pod can go elsewhere", "no_holder_fits", mode, nodes)


# --- merging into KubeSpawner's traits ----------------------------------------------------


def _name_requirement(node: str) -> Obj:
    # one value per requirement: see ValidateNodeFieldSelectorRequirement (module docstring)
    return {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}


def _pinned_elsewhere(fields: Sequence[Obj], node: str) -> bool:
    """Whether a term's own matchFields already exclude the node (the ANDed term could
    match nothing, so it is not worth emitting)."""
    return any(f.get("key") == NODE_NAME_FIELD and not match_field(f, node) for f in fields)


def merge_required(existing_terms: Sequence[Obj] | None, nodes: Sequence[str],
                   max_nodes: int = MAX_AFFINITY_NODES) -> list[Obj]:
    """`node_affinity_required` that keeps every existing constraint and adds "on one of
    `nodes`".

    Terms are ORed, so adding a bare `metadata.name` term would let the pod escape the
    existing ones (e.g. z2jh's `matchNodePurpose: require`). Instead every existing term T
    is repeated once per node n with `metadata.name In [n]` ANDed in:
    (T1 ∨ T2) ∧ (n1 ∨ n2) = (T1∧n1) ∨ (T1∧n2) ∨ (T2∧n1) ∨ (T2∧n2).
    With no existing terms the base is one empty term. Existing empty terms match nothing
    and stay that way (they are dropped, not widened). Combinations that cannot match
    (T already pins another node) are skipped; if none is left, or `nodes` is empty, the
    existing terms are returned unchanged rather than an empty list, which KubeSpawner would
    read as "no required affinity". Idempotent: merging twice gives the same list."""
    existing = [copy.deepcopy(t) for t in existing_terms or []]
    targets = list(dict.fromkeys(nodes))[:max_nodes]
    if not targets:
        return existing
    bases = [t for t in existing if t.get("matchExpressions") or t.get("matchFields")] if existing else [{}]
    out: list[Obj] = []
    for base in bases:
        exprs, fields = base.get("matchExpressions") or [], base.get("matchFields") or []
        for n in targets:
            if _pinned_elsewhere(fields, n):
                continue
            req = _name_requirement(n)
            term: Obj = {}
            if exprs:
                term["matchExpressions"] = copy.deepcopy(exprs)
            term["matchFields"] = copy.deepcopy(fields) + ([] if req in fields else [req])
            if term not in out:
                out.append(term)
    return out or existing


def merge_preferred(existing_preferred: Sequence[Obj] | None, nodes: Sequence[str], weight: int = 100,
                    max_nodes: int = MAX_AFFINITY_NODES) -> list[Obj]:
    """`node_affinity_preferred` with one `{weight, preference: metadata.name In [n]}` term
    per node appended. Preferred terms are summed per node, not ORed with the required ones,
    so the existing terms are kept as they are and nothing needs repeating: a holder scores
    `weight` more. matchFields is valid in preferences (ValidatePreferredSchedulingTerms
    validates them with ValidateNodeSelectorTerm) and names the node exactly, unlike the
    `kubernetes.io/hostname` label, which need not equal the node name on every provider.
    Terms already present are not added twice."""
    if not 1 <= weight <= 100:
        raise ValueError(f"preferred scheduling term weight must be in 1-100, not {weight}")
    out = [copy.deepcopy(t) for t in existing_preferred or []]
    for n in list(dict.fromkeys(nodes))[:max_nodes]:
        term = {"weight": weight, "preference": {"matchFields": [_name_requirement(n)]}}
        if term not in out:
            out.append(term)
    return out


def apply(decision: Decision, required: Sequence[Obj] | None, preferred: Sequence[Obj] | None,
          weight: int = 100) -> tuple[list[Obj], list[Obj]]:
    """The (node_affinity_required, node_affinity_preferred) values for a decision."""
    required, preferred = list(required or []), list(preferred or [])
    if decision.mode_used == "require":
        return merge_required(required, decision.nodes), copy.deepcopy(preferred)
    if decision.mode_used == "prefer":
        return copy.deepcopy(required), merge_preferred(preferred, decision.nodes, weight)
    return copy.deepcopy(required), copy.deepcopy(preferred)
