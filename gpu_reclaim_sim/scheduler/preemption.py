"""DefaultPreemption of the simulated kube-scheduler: which lower-priority pods to evict
on a node (`select_victims`) and which node to preempt on (`pick_preemption_node`,
`find_preemption`), without PodDisruptionBudgets. Pure, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from .facts import NodeFacts, PodView, Usage
from .filters import Status, resource_fit

REASON_PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
REASON_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_PREEMPTION_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
MSG_PREEMPTION_TERMINATING = "preemption: not eligible due to a terminating pod on the nominated node."


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
