"""What the spawn form and a waiting user's spawn page say of the cluster's GPUs: how many
are free now, how many requests wait for one, and which smaller GPU profile would start at
once. Pure functions over the camelCase node and pod dicts of the spawner's informers,
counted as the scheduler counts them (affinity's capacity check): room held only by
lower-priority pods (z2jh's user placeholders) is free, since a user's pod preempts them."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from ..signals.kube import parse_quantity
from ..signals.pod_facts import GPU_RESOURCE
from . import affinity, messages

Obj = dict[str, Any]


@dataclass(frozen=True)
class GpuRoom:
    """The cluster's whole GPUs (nvidia.com/gpu) now: `free` of `total` on ready nodes, and
    the requests waiting for a GPU (`waiting`, for `waiting_gpus` GPUs in all)."""

    free: int
    total: int
    waiting: int
    waiting_gpus: int


def profile_gpus(profile: Mapping[str, Any]) -> int:
    """The whole GPUs a KubeSpawner profile asks for (its override's extra_resource_limits
    or extra_resource_guarantees); 0 for one without, or one it cannot read."""
    override = profile.get("kubespawner_override") or {}
    for key in ("extra_resource_limits", "extra_resource_guarantees"):
        value = (override.get(key) or {}).get(GPU_RESOURCE)
        if value is not None:
            try:
                return int(parse_quantity(value))
            except (TypeError, ValueError):
                return 0
    return 0


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


def gpu_room(nodes: Iterable[Obj], pods: Sequence[Obj], priority: int = 0) -> GpuRoom:
    """Free and total GPUs of the ready, schedulable nodes, for a pod of `priority` (pods
    of lower priority are preempted for it), and the queue (messages.gpu_wait)."""
    bound = by_node(pods)
    free = total = 0
    for node in nodes:
        if not affinity.is_ready(node) or (node.get("spec") or {}).get("unschedulable"):
            continue
        status = node.get("status") or {}
        have = int(affinity.kube.resource_list(status.get("allocatable") or status.get("capacity"),
                                               skip_invalid=True).get(GPU_RESOURCE, 0))
        used = sum(affinity.pod_requests(p).get(GPU_RESOURCE, 0)
                   for p in bound.get((node.get("metadata") or {}).get("name", ""), ())
                   if (p.get("status") or {}).get("phase") not in affinity.TERMINAL_PHASES
                   and _priority(p) >= priority)
        total += have
        free += max(0, have - int(used))
    waits = [w for p in pods if (w := messages.gpu_wait(p))]
    return GpuRoom(free, total, len(waits), sum(w.gpus for w in waits))


def smaller_fit(pod: Obj, profiles: Sequence[Mapping[str, Any]], nodes: Mapping[str, Obj],
                pods: Sequence[Obj]) -> tuple[Mapping[str, Any], int] | None:
    """For a pod waiting for GPUs: the GPU profile asking for fewer that a node can take
    now (the largest such), with its GPUs; None when none does. The smaller profile is
    checked with the waiting pod's own placement (its node selector, tolerations and
    required affinity: the same GPU product) and other requests, so it says no more than
    the scheduler would do for it."""
    spec = pod.get("spec") or {}
    wanted = messages.requested_gpus(pod)
    requests = {k: v for k, v in affinity.pod_requests(spec).items() if k != GPU_RESOURCE}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    bound = by_node(pods)
    smaller = sorted(((p, n) for p in profiles if 0 < (n := profile_gpus(p)) < wanted), key=lambda pn: -pn[1])
    for profile, gpus in smaller:
        ask: dict[str, Fraction] = {**requests, GPU_RESOURCE: Fraction(gpus)}
        if any(affinity.can_take(node, ask, _priority(pod), bound.get(name, ()), spec.get("tolerations") or [],
                                 spec.get("nodeSelector") or {}, required,
                                 can_preempt=spec.get("preemptionPolicy") != "Never")
               for name, node in nodes.items()):
            return profile, gpus
    return None
