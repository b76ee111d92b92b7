"""A cluster autoscaler for the node groups whose scenario entry has `autoscaler:`: what a
cloud's cluster-autoscaler gives a real cluster from outside its control plane, through the
real API only, as a user of its own (`USER`, with cluster-autoscaler's `RULES`), adding and
removing the node agent's nodes as a cloud adds and deletes machines.

Like cluster-autoscaler it follows pods and nodes (a `ListWatch` each) and every
`scan_interval` looks at the pods the scheduler marked unschedulable (PodScheduled False /
Unschedulable), ignoring expendable pods (priority below `EXPENDABLE_PRIORITY_CUTOFF`) and
preemptors waiting for their victims (`nominatedNodeName` of an existing node). What to add is
`scaleup.plan_scale_up`'s; it records `TriggeredScaleUp` (or `NotTriggerScaleUp` with the
reasons) on the pods and registers the nodes after the group's `scaleUpDelay` (the time a
cloud takes to boot one). A node without pods (DaemonSet pods aside) for `scaleDownDelay` is
tainted `ToBeDeletedByClusterAutoscaler`, checked once more for pods, stopped and its Node
deleted, never below the group's `min`; no scale-down while a scale-up of the group is in
flight. The real kube-scheduler places the pods on the new nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from typing import Any, Protocol

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..events import event_body
from ..kubelet.nodes import GROUP_LABEL, node_manifest
from ..scenario import NodeGroup, Scenario
from .apipodapi import MERGE_PATCH
from .podfit import Obj, Usage
from .podwatch import ListWatch
from .scaleup import GroupState, plan_scale_up

log = logging.getLogger("gpu_reclaim_sim.nodeagent.clusterautoscaler")

USER = "gpu-reclaim-sim:cluster-autoscaler"
RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
         {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]
COMPONENT = "cluster-autoscaler"
EXPENDABLE_PRIORITY_CUTOFF = -10  # cluster-autoscaler's --expendable-pods-priority-cutoff
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"


class Machines(Protocol):
    """What the cloud does for the autoscaler: the node agent's nodes."""
    scenario: Scenario
    version: str  # the kubelet's, which a template node reports too

    async def add_node(self, group: NodeGroup, name: str | None = None) -> str: ...

    async def remove_node(self, name: str) -> None: ...


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_unschedulable(pod: Obj) -> bool:
    """Pending because the scheduler found no node: what the autoscaler acts on."""
    if (pod.get("spec") or {}).get("nodeName") or _terminal(pod) or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _priority(pod: Obj) -> int:
    return (pod.get("spec") or {}).get("priority") or 0


def _daemon(pod: Obj) -> bool:
    """A DaemonSet's pod, which cluster-autoscaler does not count as keeping its node."""
    return any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or [])


def _group(node: Obj) -> str | None:
    return (node["metadata"].get("labels") or {}).get(GROUP_LABEL)


class Autoscaler:
    def __init__(self, machines: Machines, api: k8s.ApiClient, groups: list[NodeGroup], *,
                 scan_interval: float | None = None) -> None:
        self.machines, self.api, self.core = machines, api, k8s.CoreV1Api(api)
        self.groups = [g for g in groups if g.autoscaler is not None]
        delays = [min(g.autoscaler.scale_up_delay, g.autoscaler.scale_down_delay) for g in self.groups if g.autoscaler]
        self.scan_interval = scan_interval or min(10.0, max(0.05, min(delays, default=10.0) / 4))
        self.pods = ListWatch(self.core.list_pod_for_all_namespaces, "autoscaler: pods", lambda t, o: None)
        self.nodes = ListWatch(self.core.list_node, "autoscaler: nodes", lambda t, o: None)
        self.templates = {g.name: node_manifest(f"template-node-for-{g.name}", g, machines.scenario,
                                                  version=machines.version)
                          for g in self.groups}
        self._upcoming: dict[str, int] = {}  # group -> nodes being added
        self._empty_since: dict[str, float] = {}
        self._told: dict[str, str] = {}  # pod uid -> its last NotTriggerScaleUp message
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        for coroutine in (self.pods.run(), self.nodes.run(), self._loop()):
            self._spawn(coroutine)

    async def stop(self) -> None:
        tasks = list(self._tasks)  # each leaves the set as it ends
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            if not self.pods.lists or not self.nodes.lists:
                continue  # not listed yet: nothing known to act on
            try:
                await self.scale_up()
                await self.scale_down()
            except (ApiException, OSError, asyncio.TimeoutError) as e:  # the next scan tries again
                log.warning("autoscaler: %s", e)

    def _usage(self) -> dict[str, Usage]:
        usage: dict[str, Usage] = defaultdict(Usage)
        for p in self.pods.known.values():
            if (node := (p.get("spec") or {}).get("nodeName")) and not _terminal(p):
                usage[node].add(p)
        return usage

    async def scale_up(self) -> None:
        pods, nodes = list(self.pods.known.values()), list(self.nodes.known.values())
        names = {n["metadata"]["name"] for n in nodes}
        pending = [p for p in pods if is_unschedulable(p) and _priority(p) >= EXPENDABLE_PRIORITY_CUTOFF
                   and (p.get("status") or {}).get("nominatedNodeName") not in names]
        pending.sort(key=lambda p: (-_priority(p), p["metadata"].get("creationTimestamp") or ""))
        usage, sizes = self._usage(), Counter(_group(n) for n in nodes)
        states = [GroupState(g, self.templates[g.name], sizes[g.name] + self._upcoming.get(g.name, 0),
                             g.name in self._upcoming, self._upcoming.get(g.name, 0)) for g in self.groups]
        plan = plan_scale_up(pending, [(n, usage[n["metadata"]["name"]]) for n in nodes], states)
        for up in plan.scale_ups:
            g = up.state.group
            assert g.autoscaler is not None  # self.groups are the autoscaled ones
            message = (f"pod triggered scale-up: [{{{g.name} {up.state.current}->"
                       f"{up.state.current + up.nodes} (max: {g.autoscaler.max})}}]")
            log.info("autoscaler: %s for %d pod(s)", message, len(up.pods))
            self._upcoming[g.name] = up.nodes
            self._spawn(self._provision(g, up.nodes))
            for p in up.pods:
                self._told.pop(p["metadata"]["uid"], None)
                await self._record(p, "TriggeredScaleUp", message)
        by_uid = {p["metadata"]["uid"]: p for p in pending}
        for uid, reasons in plan.not_helped.items():
            message = f"pod didn't trigger scale-up: {reasons}"
            if self._told.get(uid) != message:
                self._told[uid] = message
                await self._record(by_uid[uid], "NotTriggerScaleUp", message)
        for uid in [u for u in self._told if u not in by_uid]:
            del self._told[uid]

    async def _record(self, involved: Obj, reason: str, message: str) -> None:
        body: Any = event_body({**involved, "kind": involved.get("kind") or "Pod"}, reason, message,
                               type_="Normal", component=COMPONENT, host=None, field_path=None)
        try:
            await self.core.create_namespaced_event(body["metadata"]["namespace"], body)
        except ApiException as e:  # an event is no reason to stop scaling
            log.warning("autoscaler: recording %s: %s", reason, e.reason)

    async def _provision(self, group: NodeGroup, count: int) -> None:
        assert group.autoscaler is not None
        try:
            await asyncio.sleep(group.autoscaler.scale_up_delay)
            for _ in range(count):
                name = await self.machines.add_node(group)
                log.info("autoscaler: added node %s to group %s", name, group.name)
        except (ApiException, OSError, RuntimeError) as e:
            log.error("autoscaler: adding a node to %s failed: %s", group.name, e)
        finally:
            self._upcoming.pop(group.name, None)

    async def scale_down(self) -> None:
        now = time.monotonic()
        pods, nodes = list(self.pods.known.values()), list(self.nodes.known.values())
        occupied = {(p.get("spec") or {}).get("nodeName") for p in pods if not _terminal(p) and not _daemon(p)}
        occupied |= {(p.get("status") or {}).get("nominatedNodeName") for p in pods}
        for name in [n for n in self._empty_since if n not in {m["metadata"]["name"] for m in nodes}]:
            del self._empty_since[name]
        for g in self.groups:
            assert g.autoscaler is not None
            members = [n for n in nodes if _group(n) == g.name]
            for n in members:
                name = n["metadata"]["name"]
                if name in occupied or (n["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true":
                    self._empty_since.pop(name, None)
                else:
                    self._empty_since.setdefault(name, now)
            if g.name in self._upcoming:
                continue
            due = sorted((n["metadata"]["name"] for n in members if n["metadata"]["name"] in self._empty_since
                          and now - self._empty_since[n["metadata"]["name"]] >= g.autoscaler.scale_down_delay),
                         key=lambda name: (self._empty_since[name], name))
            for name in due[:max(0, len(members) - g.autoscaler.min)]:
                await self._remove(name)

    async def _remove(self, name: str) -> None:
        """Taint, give a scheduling pass in flight the time to see it, check, remove."""
        node = await self.core.read_node(name)
        taints = [t for t in self.api.sanitize_for_serialization(node.spec.taints or [])
                  if t.get("key") != TO_BE_DELETED]
        mark = {"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"}
        await self.core.patch_node(name, {"spec": {"taints": [*taints, mark]}}, **MERGE_PATCH)
        await self._record({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "uid": node.metadata.uid}}, "ScaleDown", "marked the node as toBeDeleted/unschedulable")
        await asyncio.sleep(min(1.0, self.scan_interval))
        bound = await self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        if any(p.status.phase not in ("Succeeded", "Failed") and not any(
                o.kind == "DaemonSet" for o in p.metadata.owner_references or []) for p in bound.items):
            await self.core.patch_node(name, {"spec": {"taints": taints}}, **MERGE_PATCH)
            return
        await self.machines.remove_node(name)
        await self.core.delete_node(name)
        self._empty_since.pop(name, None)
        log.info("autoscaler: removed empty node %s", name)
