"""A cluster autoscaler for the node groups whose scenario entry has `autoscaler:`.

Like the upstream cluster-autoscaler it scales up only for pods the scheduler marked
unschedulable (PodScheduled False / Unschedulable), ignoring expendable pods (priority
below -10) and preemptors that wait for their victims (nominatedNodeName set); pods
that would fit on an existing node or on a node already being added do not count.
For the rest it simulates the scheduler's filters on a template node of each group
(`nodes.node_manifest`), bin-packs them to decide how many nodes to add (up to `max`),
records `TriggeredScaleUp` (or `NotTriggerScaleUp` with the reasons) on the pods, and
adds the nodes after `scaleUpDelay` (the time a cloud takes to boot one). One scale-up
is in flight per group at a time. Nodes without pods for `scaleDownDelay` are tainted
`ToBeDeletedByClusterAutoscaler` and removed, never below `min`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..kubelet.nodes import GROUP_LABEL, node_manifest
from ..resources import BY_KIND
from ..scenario import NodeGroup
from ..scheduler.facts import NodeFacts, PodView, Usage, is_terminal, pod_priority, snapshot
from ..scheduler.filters import filter_node
from ..store import Obj

log = logging.getLogger("gpu_reclaim_sim.controllers.autoscaler")

POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]
COMPONENT = "cluster-autoscaler"
EXPENDABLE_PRIORITY_CUTOFF = -10  # --expendable-pods-priority-cutoff
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
REASON_MAX_SIZE = "max node group size reached"


def is_unschedulable(pod: Obj) -> bool:
    """Pending because the scheduler found no node: what the autoscaler acts on."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable" for c in status.get("conditions") or [])


@dataclass
class GroupState:
    group: NodeGroup
    template: NodeFacts
    current: int  # registered nodes plus those being added
    busy: bool  # a scale-up is in flight
    upcoming: int = 0  # nodes being added


@dataclass
class ScaleUp:
    state: GroupState
    nodes: int
    pods: list[PodView]


@dataclass
class Plan:
    scale_ups: list[ScaleUp] = field(default_factory=list)
    not_helped: dict[str, str] = field(default_factory=dict)  # pod uid -> reasons


def _place(pod: PodView, bins: list[tuple[NodeFacts, Usage]]) -> bool:
    for facts, usage in bins:
        if filter_node(pod, facts, usage) is None:
            usage.add(pod)
            return True
    return False


def plan_scale_up(pending: list[PodView], facts: dict[str, NodeFacts], usage: dict[str, Usage],
                  groups: list[GroupState]) -> Plan:
    """Which groups to grow by how many nodes for `pending` (most important first)."""
    # pods that fit existing or upcoming nodes wait for the scheduler, not for us
    bins = [(facts[n], usage.get(n, Usage()).copy()) for n in sorted(facts)]
    for g in groups:
        bins += [(g.template, Usage()) for _ in range(g.upcoming)]
    remaining: list[PodView] = []
    failed: set[str] = set()  # bins only fill up: a signature that failed once fails again
    for p in pending:
        if p.signature in failed or not _place(p, bins):
            failed.add(p.signature)
            remaining.append(p)
    plan = Plan()
    available = [g for g in groups if not g.busy]
    while remaining and available:
        best: tuple | None = None
        for index, g in enumerate(available):
            room = g.group.autoscaler.max - g.current if g.group.autoscaler else 0
            if room <= 0:
                continue
            new_bins: list[tuple[NodeFacts, Usage]] = []
            helped = []
            for p in remaining:
                if filter_node(p, g.template, Usage()) is not None:
                    continue
                if _place(p, new_bins):
                    helped.append(p)
                elif len(new_bins) < room:
                    new_bins.append((g.template, Usage()))
                    if _place(p, new_bins[-1:]):
                        helped.append(p)
            if helped:
                option = (len(helped), -len(new_bins), -index)
                if best is None or option > best[0]:
                    best = (option, g, len(new_bins), helped)
        if best is None:
            break
        _, g, count, helped = best
        plan.scale_ups.append(ScaleUp(g, count, helped))
        done = {p.uid for p in helped}
        remaining = [p for p in remaining if p.uid not in done]
        available.remove(g)
    for p in remaining:
        reasons: Counter[str] = Counter()
        waiting = False
        for g in groups:
            status = filter_node(p, g.template, Usage())
            if status is not None:
                reasons.update(status.reasons)
            elif g.busy:
                waiting = True  # the scale-up in flight may leave room; judge after it
            else:
                reasons[REASON_MAX_SIZE] += 1
        if not waiting and reasons:
            plan.not_helped[p.uid] = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    return plan


class Autoscaler:
    def __init__(self, cluster: Any, *, scan_interval: float | None = None,
                 expendable_priority_cutoff: int = EXPENDABLE_PRIORITY_CUTOFF) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.events = cluster.events
        self.scenario = cluster.scenario
        self.groups = [g for g in self.scenario.node_groups if g.autoscaler is not None]
        delays = [min(g.autoscaler.scale_up_delay, g.autoscaler.scale_down_delay) for g in self.groups]
        self.scan_interval = scan_interval or min(10.0, max(0.05, min(delays, default=10.0) / 4))
        self.cutoff = expendable_priority_cutoff
        self._upcoming: dict[str, int] = {}  # group -> nodes being added
        self._empty_since: dict[str, float] = {}
        self._told: dict[str, str] = {}  # pod uid -> last NotTriggerScaleUp message
        self._templates: dict[str, NodeFacts] = {}
        self._views: dict[str, tuple[Any, PodView]] = {}  # uid -> (generation, view)
        self._task: asyncio.Task | None = None
        self._provisioning: set[asyncio.Task] = set()

    async def start(self) -> None:
        if self.groups:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._provisioning) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._provisioning.clear()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("autoscaler: loop failed")

    async def run_once(self) -> None:
        self.scale_up()
        await self.scale_down()

    # --- scale-up --------------------------------------------------------------------

    def template(self, group: NodeGroup) -> NodeFacts:
        if group.name not in self._templates:
            node = node_manifest(f"template-node-for-{group.name}", group, self.scenario,
                                 getattr(self.cluster, "images", None))
            self._templates[group.name] = NodeFacts.from_node(node)
        return self._templates[group.name]

    def _view(self, pod: Obj) -> PodView:
        """PodView.from_pod, computed once per pod spec: a scan must stay cheap at 5,000 pods."""
        meta = pod["metadata"]
        cached = self._views.get(meta["uid"])
        if cached is None or cached[0] != meta.get("generation"):
            cached = self._views[meta["uid"]] = (meta.get("generation"), PodView.from_pod(pod))
        return cached[1]

    def _group_sizes(self, nodes: list[Obj]) -> Counter[str | None]:
        return Counter((n["metadata"].get("labels") or {}).get(GROUP_LABEL) for n in nodes)

    def scale_up(self) -> Plan | None:
        pods, nodes = self.store.objects(POD), self.store.objects(NODE)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._views if u not in live]:
            del self._views[uid]
        names = {n["metadata"]["name"] for n in nodes}
        pending = [p for p in pods if is_unschedulable(p) and pod_priority(p) >= self.cutoff
                   and (p.get("status") or {}).get("nominatedNodeName") not in names]
        if not pending:
            return None
        by_uid = {p["metadata"]["uid"]: p for p in pending}
        pending.sort(key=lambda p: (-pod_priority(p), p["metadata"].get("creationTimestamp") or ""))
        facts, usage = snapshot(nodes, pods, self._view)
        sizes = self._group_sizes(nodes)
        states = [GroupState(g, self.template(g), sizes[g.name] + self._upcoming.get(g.name, 0),
                             g.name in self._upcoming, self._upcoming.get(g.name, 0))
                  for g in self.groups]
        plan = plan_scale_up([self._view(p) for p in pending], facts, usage, states)
        for up in plan.scale_ups:
            g = up.state.group
            assert g.autoscaler is not None  # self.groups are the autoscaled ones
            message = (f"pod triggered scale-up: [{{{g.name} {up.state.current}->"
                       f"{up.state.current + up.nodes} (max: {g.autoscaler.max})}}]")
            log.info("autoscaler: %s for %d pod(s)", message[len("pod triggered scale-up: "):], len(up.pods))
            for p in up.pods:
                self.events.record(by_uid[p.uid], "TriggeredScaleUp", message, component=COMPONENT)
                self._told.pop(p.uid, None)
            self._upcoming[g.name] = up.nodes
            task = asyncio.get_running_loop().create_task(self._provision(g, up.nodes))
            self._provisioning.add(task)
            task.add_done_callback(self._provisioning.discard)
        for uid, reasons in plan.not_helped.items():
            message = f"pod didn't trigger scale-up: {reasons}"
            if self._told.get(uid) != message:
                self._told[uid] = message
                self.events.record(by_uid[uid], "NotTriggerScaleUp", message, component=COMPONENT)
        for uid in [u for u in self._told if u not in by_uid]:
            del self._told[uid]
        return plan

    async def _provision(self, group: NodeGroup, count: int) -> None:
        assert group.autoscaler is not None  # self.groups are the autoscaled ones
        try:
            await asyncio.sleep(group.autoscaler.scale_up_delay)
            for _ in range(count):
                name = await self.cluster.add_node(group)
                log.info("autoscaler: added node %s to group %s", name, group.name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("autoscaler: adding a node to %s failed", group.name)
        finally:
            self._upcoming.pop(group.name, None)

    # --- scale-down ------------------------------------------------------------------

    async def scale_down(self) -> list[str]:
        now = asyncio.get_running_loop().time()
        pods, nodes = self.store.objects(POD), self.store.objects(NODE)
        occupied = {(p.get("spec") or {}).get("nodeName") for p in pods if not is_terminal(p)}
        occupied |= {(p.get("status") or {}).get("nominatedNodeName") for p in pods}
        seen, removed = set(), []
        for g in self.groups:
            members = sorted(n["metadata"]["name"] for n in nodes
                             if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == g.name)
            seen.update(members)
            for n in nodes:
                name = n["metadata"]["name"]
                if name not in members:
                    continue
                disabled = (n["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true"
                if name in occupied or disabled:
                    self._empty_since.pop(name, None)
                else:
                    self._empty_since.setdefault(name, now)
            if g.name in self._upcoming:
                continue  # no scale-down while a scale-up is in flight
            due = sorted((n for n in members if n in self._empty_since
                          and now - self._empty_since[n] >= g.autoscaler.scale_down_delay),
                         key=lambda n: (self._empty_since[n], n))
            for name in due[:max(0, len(members) - g.autoscaler.min)]:
                if await self._remove(name):
                    removed.append(name)
        for name in [n for n in self._empty_since if n not in seen]:
            del self._empty_since[name]
        return removed

    def _bound(self, node: str) -> bool:
        return any((p.get("spec") or {}).get("nodeName") == node and not is_terminal(p)
                   for p in self.store.objects(POD))

    async def _remove(self, name: str) -> bool:
        """Taint, give a scheduling pass in flight the time to see it, check, remove."""
        def taint(o: Obj) -> None:
            taints = o.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == TO_BE_DELETED for t in taints):
                taints.append({"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"})

        def untaint(o: Obj) -> None:
            o["spec"]["taints"] = [t for t in o["spec"].get("taints", []) if t.get("key") != TO_BE_DELETED]

        try:
            node = self.store.update(NODE, None, name, taint)
        except errors.ApiError:
            return False
        try:
            self.events.record(node, "ScaleDown", "marked the node as toBeDeleted/unschedulable",
                               component=COMPONENT)
        except errors.ApiError as e:  # node events live in "default"; none is no reason to keep the node
            log.warning("autoscaler: cannot record ScaleDown on %s: %s", name, e.message)
        await asyncio.sleep(min(0.1, self.scan_interval))
        if self._bound(name):
            try:
                self.store.update(NODE, None, name, untaint)
            except errors.ApiError:
                pass
            return False
        try:
            await self.cluster.remove_node(name)
        except Exception:
            log.exception("autoscaler: removing node %s failed", name)
            return False
        self._empty_since.pop(name, None)
        log.info("autoscaler: removed empty node %s", name)
        return True
