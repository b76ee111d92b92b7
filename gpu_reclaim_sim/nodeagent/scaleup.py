"""The cluster autoscaler's scale-up decision (sim.nodeagent.clusterautoscaler), without I/O: which
node groups to grow by how many nodes for the pods the scheduler could not place.

As cluster-autoscaler decides it: pods that would fit an existing node, or a node already
being added, wait for the scheduler, not for a new node; the rest are bin-packed onto
template nodes of each group that could take them (up to its `max`), the group that helps
the most pods with the fewest nodes first; one scale-up in flight per group. A pod no group
can help gets the reasons, counted over the groups' templates ("1 Insufficient
nvidia.com/gpu, 1 max node group size reached"); one a group in flight might help waits."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..api.requests import pod_requests
from ..scenario import NodeGroup
from .podfit import Obj, Usage, misfit

REASON_MAX_SIZE = "max node group size reached"


@dataclass
class GroupState:
    group: NodeGroup
    template: Obj  # a Node of the group as it would register (sim.kubelet.nodes.node_manifest)
    current: int  # registered nodes plus those being added
    busy: bool  # a scale-up is in flight
    upcoming: int = 0  # nodes being added


@dataclass
class ScaleUp:
    state: GroupState
    nodes: int
    pods: list[Obj]


@dataclass
class Plan:
    scale_ups: list[ScaleUp] = field(default_factory=list)
    not_helped: dict[str, str] = field(default_factory=dict)  # pod uid -> reasons


def _signature(pod: Obj) -> str:
    """What decides where a pod fits: pods alike fail alike."""
    spec = pod.get("spec") or {}
    return json.dumps([{k: str(v) for k, v in pod_requests(pod).items()}, spec.get("nodeSelector"),
                       spec.get("affinity"), spec.get("tolerations")], sort_keys=True, default=str)


def _place(pod: Obj, bins: list[tuple[Obj, Usage]]) -> bool:
    for node, usage in bins:
        if not misfit(pod, node, usage):
            usage.add(pod)
            return True
    return False


def _uid(pod: Obj) -> str:
    return pod["metadata"]["uid"]


def _best(remaining: list[Obj], available: list[GroupState]) -> tuple[GroupState, int, list[Obj]] | None:
    """The group whose new nodes help the most pods, with the fewest nodes."""
    best: tuple[Any, GroupState, int, list[Obj]] | None = None
    for index, g in enumerate(available):
        room = g.group.autoscaler.max - g.current if g.group.autoscaler else 0
        if room <= 0:
            continue
        new_bins: list[tuple[Obj, Usage]] = []
        helped = []
        for p in remaining:
            if misfit(p, g.template, Usage()):
                continue
            if _place(p, new_bins):
                helped.append(p)
            elif len(new_bins) < room:
                new_bins.append((g.template, Usage()))
                if _place(p, new_bins[-1:]):
                    helped.append(p)
        option = (len(helped), -len(new_bins), -index)
        if helped and (best is None or option > best[0]):
            best = (option, g, len(new_bins), helped)
    return best[1:] if best else None


def plan_scale_up(pending: list[Obj], existing: list[tuple[Obj, Usage]], groups: list[GroupState]) -> Plan:
    """Which groups to grow by how many nodes for `pending` (most important first), given
    the registered nodes and what their pods use (`existing`, not changed)."""
    bins = [(node, usage.copy()) for node, usage in existing]
    for g in groups:
        bins += [(g.template, Usage()) for _ in range(g.upcoming)]
    remaining: list[Obj] = []
    failed: set[str] = set()  # bins only fill up: a signature that failed once fails again
    for p in pending:
        if _signature(p) in failed or not _place(p, bins):
            failed.add(_signature(p))
            remaining.append(p)
    plan = Plan()
    available = [g for g in groups if not g.busy]
    while remaining and available and (best := _best(remaining, available)):
        g, count, helped = best
        plan.scale_ups.append(ScaleUp(g, count, helped))
        done = {_uid(p) for p in helped}
        remaining = [p for p in remaining if _uid(p) not in done]
        available.remove(g)
    for p in remaining:
        reasons: Counter[str] = Counter()
        waiting = False
        for g in groups:
            why = misfit(p, g.template, Usage())
            if why:
                reasons.update(why)
            elif g.busy:
                waiting = True  # the scale-up in flight may leave room; judge after it
            else:
                reasons[REASON_MAX_SIZE] += 1
        if not waiting and reasons:
            plan.not_helped[_uid(p)] = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    return plan
