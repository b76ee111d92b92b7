"""The DaemonSet controller (pkg/controller/daemon): one pod per node that should run it.

A node should run the set's pod when the template's nodeSelector and required node
affinity match it and it has no NoSchedule/NoExecute taint the pod does not tolerate
(with the tolerations the controller adds to every daemon pod: not-ready, unreachable,
disk/memory/pid pressure, unschedulable). Each pod is pinned to its node by a required
node affinity on `metadata.name` and placed by the scheduler, as upstream does. A
template change replaces pods (RollingUpdate, at most `maxUnavailable` missing at a
time; OnDelete waits). z2jh's continuous image puller is such a set: its pods pull the
user images onto every user node.

Not simulated: ControllerRevisions (the `controller-revision-hash` label is the
template's hash), `maxSurge`, `minReadySeconds` in the rolling update's budget.
"""

from __future__ import annotations

import copy
from typing import Any

from jupyterhub_gpu_reclaim.spawner.kube import match_node_selector_term, tolerates

from .resources import BY_KIND
from .store import Change, Obj
from .workloads import (REVISION_LABEL, WorkloadController, compute_hash, drop_zeros, int_or_percent,
                        is_active, is_ready, object_key, pod_from_template, pod_revision)

POD, NODE, DS = BY_KIND["Pod"], BY_KIND["Node"], BY_KIND["DaemonSet"]
GENERATION_LABEL = "pod-template-generation"
# util.AddOrUpdateDaemonPodTolerations
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]

def _node_facts(node: Obj | None) -> Any:
    if node is None:
        return None
    spec = node.get("spec") or {}
    return (node["metadata"].get("labels"), spec.get("taints"), spec.get("unschedulable"))


def _pinned_node(pod: Obj) -> str | None:
    """The node a daemon pod is for: its nodeName, else its metadata.name affinity."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and f.get("values"):
                return f["values"][0]
    return None


def _revision(ds: Obj) -> str:
    """The `controller-revision-hash` of the current template (no ControllerRevisions)."""
    return compute_hash(ds["spec"].get("template") or {})


def _by_node(pods: list[Obj]) -> dict[str, list[Obj]]:
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        by_node.setdefault(_pinned_node(pod) or "", []).append(pod)
    return by_node


def _pin(spec: Obj, node: str) -> None:
    """util.ReplaceDaemonSetPodNodeNameNodeAffinity."""
    field = [{"key": "metadata.name", "operator": "In", "values": [node]}]
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or []
    required["nodeSelectorTerms"] = [{**t, "matchFields": field} for t in terms] or [{"matchFields": field}]


def should_run(template_spec: Obj, node: Obj) -> bool:
    """nodeShouldRunDaemonPod: node selector and affinity match, taints tolerated."""
    labels = node["metadata"].get("labels") or {}
    name = node["metadata"]["name"]
    if any(labels.get(k) != v for k, v in (template_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((template_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None and not any(match_node_selector_term(t, labels, name)
                                        for t in required.get("nodeSelectorTerms") or []):
        return False
    tolerations = (template_spec.get("tolerations") or []) + DAEMON_TOLERATIONS
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations):
            return False
    return True


class DaemonSetController(WorkloadController):
    name = "daemonset-controller"
    owner_type = DS

    def __init__(self, cluster: Any, gc: Any) -> None:
        super().__init__(cluster, gc)
        self.watch(NODE, self._on_node)

    def _on_node(self, change: Change) -> None:
        """Nodes that come, go or change labels or taints (not every status update)."""
        if change.type != "MODIFIED" or _node_facts(change.old) != _node_facts(change.new):
            for ds in self.store.objects(DS):
                self.enqueue(object_key(ds))

    def _wanted(self, ds: Obj) -> set[str]:
        """The nodes that should run the set's pod."""
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        return {n["metadata"]["name"] for n in self.store.objects(NODE) if should_run(spec, n)}

    def sync_children(self, ds: Obj, children: list[Obj]) -> None:
        wanted, by_node, revision = self._wanted(ds), _by_node(children), _revision(ds)
        for node in sorted(wanted):
            pods = [p for p in by_node.get(node, []) if not p["metadata"].get("deletionTimestamp")]
            failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
            for pod in failed:
                self.delete_pod(ds, pod)
            live = [p for p in pods if p not in failed]
            if not live and not failed and not by_node.get(node):
                self._create(ds, node, revision)
            for extra in sorted(live, key=lambda p: p["metadata"].get("creationTimestamp", ""))[1:]:
                self.delete_pod(ds, extra)
        for node, pods in by_node.items():
            if node not in wanted:
                for pod in pods:
                    if not pod["metadata"].get("deletionTimestamp"):
                        self.delete_pod(ds, pod)
        strategy = ds["spec"].get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        budget = int_or_percent((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1), len(wanted),
                                round_up=True) or 1
        unavailable = sum(1 for n in wanted if not any(is_active(p) and is_ready(p) for p in by_node.get(n, [])))
        for node in sorted(wanted):
            if unavailable >= budget:
                return
            for pod in by_node.get(node, []):
                if is_active(pod) and pod_revision(pod) != revision:
                    self.delete_pod(ds, pod)
                    unavailable += 1

    def _create(self, ds: Obj, node: str, revision: str) -> None:
        template = copy.deepcopy(ds["spec"].get("template") or {})
        spec = template.setdefault("spec", {})
        tolerations = spec.setdefault("tolerations", [])
        for t in DAEMON_TOLERATIONS:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tolerations):
                tolerations.append(dict(t))
        _pin(spec, node)
        pod = pod_from_template(ds, template, labels={
            REVISION_LABEL: revision, GENERATION_LABEL: str(ds["metadata"].get("generation", 1))})
        self.create_pod(ds, pod)

    def sync_status(self, ds: Obj, children: list[Obj]) -> None:
        wanted, by_node, revision = self._wanted(ds), _by_node(children), _revision(ds)
        scheduled = misscheduled = updated = 0
        ready: list[Obj] = []
        for node, pods in by_node.items():
            live = [p for p in pods if is_active(p)]
            if not live:
                continue
            if node not in wanted:
                misscheduled += 1
                continue
            scheduled += 1
            pod = live[0]
            if is_ready(pod):
                ready.append(pod)
            updated += pod_revision(pod) == revision
        available = self.count_available(ds, ready)
        status = drop_zeros({
            "currentNumberScheduled": scheduled, "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": len(wanted), "numberReady": len(ready),
            "observedGeneration": ds["metadata"].get("generation", 1), "updatedNumberScheduled": updated,
            "numberAvailable": available, "numberUnavailable": len(wanted) - available,
        }, keep=("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"))
        self.write_status(ds, status)
