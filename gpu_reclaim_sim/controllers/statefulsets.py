"""The StatefulSet controller (pkg/controller/statefulset).

Pods `<set>-0 … <set>-N-1` (from `spec.ordinals.start`), each with hostname = its name and
subdomain = `spec.serviceName`, the labels `statefulset.kubernetes.io/pod-name`,
`apps.kubernetes.io/pod-index` and `controller-revision-hash`, and for each
`volumeClaimTemplates` entry a PVC `<claim>-<set>-<ordinal>` created before the pod
(kept when the pod or set goes unless `persistentVolumeClaimRetentionPolicy` says Delete).
`OrderedReady` creates one pod at a time, each once the previous one is Running and
Ready, and removes the highest ordinal first; `Parallel` does all at once. A template
change replaces pods from the highest ordinal down (RollingUpdate, down to `partition`),
one at a time, waiting for each replacement to be ready; `OnDelete` waits for the user.

Not simulated: ControllerRevision objects (the revision names are `<set>-<hash>` of the
template, so `kubectl rollout history/undo statefulset` do not work), `minReadySeconds`
on rolling updates, `maxUnavailable`.
"""

from __future__ import annotations

import copy
import re

from .controller import owner_reference
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Obj
from .workloads import (REVISION_LABEL, WorkloadController, compute_hash, drop_zeros, is_ready,
                        pod_from_template, pod_revision, record)

POD, PVC, STS = BY_KIND["Pod"], BY_KIND["PersistentVolumeClaim"], BY_KIND["StatefulSet"]
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def _running_and_ready(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and is_ready(pod)


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _revision(sts: Obj) -> str:
    """The update revision's name: `<set>-<template hash>` (no ControllerRevision objects)."""
    return f"{sts['metadata']['name']}-{compute_hash(sts['spec'].get('template') or {})}"


def claim_name(template: Obj, set_name: str, ordinal: int) -> str:
    return f"{template['metadata']['name']}-{set_name}-{ordinal}"


class StatefulSetController(WorkloadController):
    name = "statefulset-controller"
    owner_type = STS

    @staticmethod
    def _ordinal(pod: Obj) -> int:
        m = re.search(r"-(\d+)$", pod["metadata"]["name"])
        return int(m.group(1)) if m else -1

    def sync_children(self, sts: Obj, children: list[Obj]) -> None:
        pods = {self._ordinal(p): p for p in children}
        revision = _revision(sts)
        spec = sts["spec"]
        ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        end = start + int(spec.get("replicas", 1))
        for ordinal in range(start, end):
            pod = pods.get(ordinal)
            if pod is None:
                self._create(sts, ordinal, revision)
                if ordered:
                    return
                continue
            if _finished(pod) and not pod["metadata"].get("deletionTimestamp"):
                self._delete(sts, pod)  # recreated on the next sync, as a failed member is
                if ordered:
                    return
                continue
            if ordered and (pod["metadata"].get("deletionTimestamp") or not _running_and_ready(pod)):
                return  # wait for it before the next ordinal
        condemned = sorted((o for o in pods if o >= end or o < start), reverse=True)
        for ordinal in condemned:
            pod = pods[ordinal]
            if pod["metadata"].get("deletionTimestamp"):
                if ordered:
                    return
                continue
            self._delete(sts, pod)
            if ordered:
                return
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        for ordinal in range(end - 1, max(start, start + partition) - 1, -1):
            pod = pods.get(ordinal)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return
            if pod_revision(pod) != revision:
                self._delete(sts, pod)
                return
            if not _running_and_ready(pod):
                return

    def _create(self, sts: Obj, ordinal: int, revision: str) -> None:
        spec, meta = sts["spec"], sts["metadata"]
        ns, set_name = meta["namespace"], meta["name"]
        pod_name = f"{set_name}-{ordinal}"
        template = copy.deepcopy(spec.get("template") or {})
        volumes = template.setdefault("spec", {}).setdefault("volumes", [])
        for claim in spec.get("volumeClaimTemplates") or []:
            cname = claim_name(claim, set_name, ordinal)
            self._ensure_claim(sts, claim, cname, pod_name)
            volumes[:] = [v for v in volumes if v.get("name") != claim["metadata"]["name"]]
            volumes.append({"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": cname}})
        if not volumes:
            template["spec"].pop("volumes")
        pod = pod_from_template(sts, template, name=pod_name, labels={
            REVISION_LABEL: revision, POD_NAME_LABEL: pod_name, POD_INDEX_LABEL: str(ordinal)})
        pod["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        try:
            self.cluster.create(POD, pod, ns)
        except ApiError as e:
            if e.code == 409:
                return  # the old pod of that name is still going
            record(self.cluster, sts, "FailedCreate",
                   f"create Pod {pod_name} in StatefulSet {set_name} failed error: {e.message}", self.name, "Warning")
            raise
        record(self.cluster, sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {set_name} successful",
               self.name)

    def _ensure_claim(self, sts: Obj, template: Obj, cname: str, pod_name: str) -> None:
        ns, set_name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        if self.store.find(PVC, ns, cname) is not None:
            return
        labels = {**(template["metadata"].get("labels") or {}),
                  **((sts["spec"].get("selector") or {}).get("matchLabels") or {})}
        claim: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": cname, "namespace": ns, "labels": labels},
                      "spec": copy.deepcopy(template.get("spec") or {})}
        if template["metadata"].get("annotations"):
            claim["metadata"]["annotations"] = dict(template["metadata"]["annotations"])
        if (sts["spec"].get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted") == "Delete":
            claim["metadata"]["ownerReferences"] = [owner_reference(sts)]
        try:
            self.cluster.create(PVC, claim, ns)
        except ApiError as e:
            record(self.cluster, sts, "FailedCreate", f"create Claim {cname} for Pod {pod_name} in StatefulSet "
                   f"{set_name} failed error: {e.message}", self.name, "Warning")
            raise
        record(self.cluster, sts, "SuccessfulCreate",
               f"create Claim {cname} Pod {pod_name} in StatefulSet {set_name} success", self.name)

    def deleted_message(self, sts: Obj, pod: Obj) -> str:
        return f"delete Pod {pod['metadata']['name']} in StatefulSet {sts['metadata']['name']} successful"

    def _delete(self, sts: Obj, pod: Obj) -> None:
        if not self.delete_pod(sts, pod):
            return
        meta = pod["metadata"]
        if (sts["spec"].get("persistentVolumeClaimRetentionPolicy") or {}).get("whenScaled") == "Delete":
            ordinal = self._ordinal(pod)
            start = int((sts["spec"].get("ordinals") or {}).get("start") or 0)
            if ordinal >= start + int(sts["spec"].get("replicas", 1)):
                for claim in sts["spec"].get("volumeClaimTemplates") or []:
                    cname = claim_name(claim, sts["metadata"]["name"], ordinal)
                    if self.store.find(PVC, meta["namespace"], cname) is not None:
                        self.store.delete(PVC, meta["namespace"], cname)

    def sync_status(self, sts: Obj, pods: list[Obj]) -> None:
        spec, previous = sts["spec"], sts.get("status") or {}
        revision = _revision(sts)
        current_rev = previous.get("currentRevision") or revision
        ready = [p for p in pods if _running_and_ready(p)]
        replicas = current = updated = 0
        for pod in pods:
            created = bool((pod.get("status") or {}).get("phase"))
            replicas += created
            if created and not pod["metadata"].get("deletionTimestamp"):
                pod_rev = pod_revision(pod)
                current += pod_rev == current_rev
                updated += pod_rev == revision
        want = int(spec.get("replicas", 1))
        if updated == want and len(ready) == want and replicas == want:
            current_rev, current = revision, updated  # the rolling update is complete
        status = drop_zeros({
            "observedGeneration": sts["metadata"].get("generation", 1), "replicas": replicas,
            "readyReplicas": len(ready), "currentReplicas": current, "updatedReplicas": updated,
            "availableReplicas": self.count_available(sts, ready), "currentRevision": current_rev, "updateRevision": revision,
            "collisionCount": previous.get("collisionCount", 0),
        }, keep=("replicas", "availableReplicas", "collisionCount"))
        self.write_status(sts, status)
