"""The simulated kube-scheduler's loop (the imperative shell around its package's pure
plugins): it follows pods and nodes through store watches, keeps per-node usage
incrementally (the scheduler cache), schedules pending pods one pass at a time in
priority order, binds them, preempts, and writes the PodScheduled condition and the
Scheduled / FailedScheduling / Preempted events in upstream words.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .. import errors
from ..resources import BY_KIND
from .facts import (
    DEFAULT_SCHEDULER,
    NodeFacts,
    PodView,
    Usage,
    is_terminal,
    start_time,
    terminating_by_preemption,
)
from .filters import MSG_NO_NODES, Status, filter_node, fit_error_message
from .preemption import MSG_PREEMPTION_NEVER, MSG_PREEMPTION_TERMINATING, find_preemption
from .scores import DEFAULT_FIT_RESOURCES, image_spread, score_nodes, select_host
from ..store import Filter, Obj
from ..api.timestamps import rfc3339

log = logging.getLogger("gpu_reclaim_sim.scheduler.scheduler")

POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]


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
                if p.priority < pod.priority and other and terminating_by_preemption(other.obj):
                    return MSG_PREEMPTION_TERMINATING, None, False
        def start_of(uid: str) -> float:
            r = self._pods.get(uid)
            return start_time(r.obj) if r else math.inf

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
