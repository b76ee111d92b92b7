"""What the spawn form and a waiting user's spawn page say of the cluster's GPUs: how many
are free now, how many requests wait for one, and which smaller GPU profile would start at
once. Pure functions over the camelCase node and pod dicts of the spawner's informers,
counted as the scheduler counts them (affinity's capacity check): room held only by
lower-priority pods (z2jh's user placeholders) is free, since a user's pod preempts them.
Every GPU resource counts (`pod_facts.is_gpu_resource`: whole GPUs, MIG instances,
time-sliced replicas), each kind apart (`pod_facts.gpu_kind`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Collection, Iterable, Mapping, Sequence

from ..signals.kube import parse_quantity
from ..signals.node_gpus import summed
from ..signals.pod_facts import GPU_KINDS, GPU_PRODUCT_LABEL, by_kind, gpu_kind, is_gpu_resource
from . import affinity, messages

Obj = dict[str, Any]


@dataclass(frozen=True)
class GpuRoom:
    """The cluster's GPUs now, by kind (GPU_KINDS' keys, in its order; kinds no ready node
    has left out): `free` of `total` on ready nodes, and the requests waiting for a GPU
    (`waiting`, for `waiting_gpus` in all, by kind)."""

    free: dict[str, int]
    total: dict[str, int]
    waiting: int
    waiting_gpus: dict[str, int]


def profile_request(profile: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources a KubeSpawner profile asks for (its override's extra_resource_limits,
    else extra_resource_guarantees), each a whole number; {} for one without, or one it cannot
    read (the profile list is the admin's config)."""
    override = profile.get("kubespawner_override") or {}
    for key in ("extra_resource_limits", "extra_resource_guarantees"):
        asked = override.get(key) or {}
        gpus = {k: v for k, v in asked.items() if isinstance(k, str) and is_gpu_resource(k)} \
            if isinstance(asked, Mapping) else {}
        if gpus:
            try:
                out = {k: parse_quantity(v) for k, v in gpus.items()}
            except (TypeError, ValueError):
                return {}
            return {k: int(v) for k, v in out.items() if v > 0 and v == int(v)}
    return {}


def profile_gpus(profile: Mapping[str, Any]) -> int:
    """The GPUs a KubeSpawner profile asks for, each MIG instance or replica one (as
    `pod_facts.requested_gpus` counts a pod's); 0 for one without."""
    return sum(profile_request(profile).values())


def _priority(pod: Obj) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """The pods bound to each node."""
    out: dict[str, list[Obj]] = {}
    for p in pods:
        name = (p.get("spec") or {}).get("nodeName")
        if name:
            out.setdefault(name, []).append(p)
    return out


def _product(node: Obj) -> str:
    """The node's GPU product label (GPU feature discovery's), which says whether its plain
    nvidia.com/gpu are time-sliced replicas (`pod_facts.gpu_kind`)."""
    return str(((node.get("metadata") or {}).get("labels") or {}).get(GPU_PRODUCT_LABEL, ""))


def gpus_by_kind(request: Mapping[str, int], node: Obj) -> dict[str, int]:
    """A GPU request (profile_request) by kind (`pod_facts.by_kind`) as `node` would give it:
    the same resource is a whole GPU on one node and a shared one on another."""
    return by_kind(request, _product(node))


def gpu_room(nodes: Iterable[Obj], pods: Sequence[Obj], priority: int = 0,
             resources: Collection[str] | None = None) -> GpuRoom:
    """Free and total GPUs of each kind on the ready, schedulable nodes (of the GPU
    `resources` only, if given), for a pod of `priority` (pods of lower priority are
    preempted for it), and the queue (messages.gpu_wait)."""
    bound = by_node(pods)
    free = dict.fromkeys(GPU_KINDS, 0)
    total = dict.fromkeys(GPU_KINDS, 0)
    for node in nodes:
        if not affinity.is_ready(node) or (node.get("spec") or {}).get("unschedulable"):
            continue
        status, meta = node.get("status") or {}, node.get("metadata") or {}
        product = _product(node)
        have = affinity.kube.resource_list(status.get("allocatable") or status.get("capacity"), skip_invalid=True)
        used = [affinity.pod_requests(p) for p in bound.get(meta.get("name", ""), ())
                if (p.get("status") or {}).get("phase") not in affinity.TERMINAL_PHASES and _priority(p) >= priority]
        for name, amount in have.items():
            kind = gpu_kind(name, product)
            if kind is not None and (resources is None or name in resources):
                total[kind] += int(amount)
                free[kind] += max(0, int(amount) - int(sum(u.get(name, 0) for u in used)))
    waits = [w for p in pods if (w := messages.gpu_wait(p))]
    return GpuRoom({k: v for k, v in free.items() if total[k]}, {k: v for k, v in total.items() if v},
                   len(waits), summed(w.kinds for w in waits))


@dataclass(frozen=True)
class ProfileRoom:
    """A GPU profile's room now: its GPU resources free of those on the nodes it may use, by
    kind (as GpuRoom), and whether one of them can take it now (`fits`)."""

    free: dict[str, int]
    total: dict[str, int]
    fits: bool


#: the KubeSpawner traits that place a pod, as a profile's override replaces them
PLACEMENT = ("node_selector", "tolerations", "node_affinity_required")


def profile_room(profile: Mapping[str, Any], nodes: Mapping[str, Obj], pods: Sequence[Obj],
                 spawner_placement: Mapping[str, Any] | None = None) -> ProfileRoom | None:
    """Whether a GPU profile would start now, checked as the scheduler would place its pod:
    its GPU resources, and its node selector, tolerations and required node affinity
    (PLACEMENT: its override's, else the spawner's, `spawner_placement`); None for a profile
    without GPUs or one whose placement it cannot read (the admin's config)."""
    asked = profile_request(profile)
    override = profile.get("kubespawner_override") or {}
    if not asked or not isinstance(override, Mapping):
        return None
    place = {**(spawner_placement or {}), **{k: override[k] for k in PLACEMENT if k in override}}
    try:
        selector = dict(place.get("node_selector") or {})
        tolerations = list(place.get("tolerations") or [])
        required = list(place.get("node_affinity_required") or [])
        usable = {name: node for name, node in nodes.items()
                  if not affinity.static_reason(node, tolerations, selector, required)}
        room = gpu_room(usable.values(), pods, resources=asked)
        bound = by_node(pods)
        ask = {k: Fraction(v) for k, v in asked.items()}
        fits = any(affinity.can_take(node, ask, 0, bound.get(name, ()), tolerations, selector, required)
                   for name, node in usable.items())
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return ProfileRoom(room.free, room.total, fits)


def smaller_fit(pod: Obj, profiles: Sequence[Mapping[str, Any]], nodes: Mapping[str, Obj],
                pods: Sequence[Obj]) -> tuple[Mapping[str, Any], dict[str, int]] | None:
    """For a pod waiting for GPUs: the GPU profile asking for fewer that a node can take
    now (the largest such), with its GPUs by kind on that node (gpus_by_kind: "1 MIG slice",
    not "1 GPU"); None when none does. The smaller profile is checked with the waiting pod's
    own placement (its node selector, tolerations and required affinity: the same GPU
    product) and other requests, so it says no more than the scheduler would do for it."""
    spec = pod.get("spec") or {}
    wanted = messages.requested_gpus(pod)
    requests = {k: v for k, v in affinity.pod_requests(spec).items() if not is_gpu_resource(k)}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    bound = by_node(pods)
    smaller = sorted((p for p in profiles if 0 < profile_gpus(p) < wanted), key=lambda p: -profile_gpus(p))
    for profile in smaller:
        asked = profile_request(profile)
        ask: dict[str, Fraction] = {**requests, **{k: Fraction(v) for k, v in asked.items()}}
        for name, node in nodes.items():
            if affinity.can_take(node, ask, _priority(pod), bound.get(name, ()), spec.get("tolerations") or [],
                                 spec.get("nodeSelector") or {}, required,
                                 can_preempt=spec.get("preemptionPolicy") != "Never"):
                return profile, gpus_by_kind(asked, node)
    return None
