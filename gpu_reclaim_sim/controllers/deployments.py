"""The ReplicaSet and Deployment controllers (pkg/controller/replicaset, .../deployment).

- A ReplicaSet keeps `spec.replicas` active pods made from its template (named
  `<rs>-<5 random>`, owned by it), deleting the least useful first (unscheduled, pending,
  not ready, newest) when it has too many, and reports replicas / ready / available
  (ready for `minReadySeconds`).
- A Deployment owns one ReplicaSet per pod template, named `<deployment>-<hash>` with the
  `pod-template-hash` label on the set, its selector and its pods. A template change
  makes a new ReplicaSet and moves the replicas to it: **Recreate** scales the old sets to
  0 and starts the new one once every old pod is gone; **RollingUpdate** surges up to
  `maxSurge` new pods and removes old ones while at most `maxUnavailable` are missing.
  Old sets beyond `revisionHistoryLimit` are deleted. The status (replicas, updated,
  ready, available, unavailable, the `Available` and `Progressing` conditions, the
  `deployment.kubernetes.io/revision` annotations) is what `kubectl rollout status`
  and `kubectl get deploy` read.

Not simulated: `progressDeadlineSeconds` (a rollout never times out), adoption of
orphaned ReplicaSets or pods by selector, `paused` beyond keeping the sets as they are,
and the exact template hash of a real cluster (same shape, other values).
"""

from __future__ import annotations

import copy
from typing import Any

from .. import errors
from .controller import controller_of, owner_reference
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Change, Obj
from ..api.timestamps import rfc3339
from .workloads import (Key, WorkloadController, compute_hash, drop_zeros, int_or_percent, is_active,
                        is_ready, pod_from_template, record)

POD, RS, DEPLOY = BY_KIND["Pod"], BY_KIND["ReplicaSet"], BY_KIND["Deployment"]
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
BURST = 500  # pods one ReplicaSet sync may create (the controller's burstReplicas)
_PHASE_RANK: dict[str | None, int] = {"Pending": 0, "Unknown": 1, "Running": 2}


def _replicas(obj: Obj) -> int:
    return int((obj.get("spec") or {}).get("replicas", 1) or 0)


def _status(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


class ReplicaSetController(WorkloadController):
    name = "replicaset-controller"
    owner_type = RS

    def sync_children(self, rs: Obj, pods: list[Obj]) -> None:
        active = [p for p in pods if is_active(p)]
        diff = _replicas(rs) - len(active)
        for _ in range(min(diff, BURST)):
            self.create_pod(rs, pod_from_template(rs, rs["spec"].get("template") or {}))
        if diff < 0:
            for pod in sorted(active, key=_deletion_rank)[:-diff]:
                self.delete_pod(rs, pod)

    def sync_status(self, rs: Obj, pods: list[Obj]) -> None:
        active = [p for p in pods if is_active(p)]
        spec = rs.get("spec") or {}
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        ready = [p for p in active if is_ready(p)]
        labelled = sum(1 for p in active
                       if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items()))
        status = drop_zeros({
            "replicas": len(active), "fullyLabeledReplicas": labelled, "readyReplicas": len(ready),
            "availableReplicas": self.count_available(rs, ready), "observedGeneration": rs["metadata"].get("generation", 1),
        }, keep=("replicas",))
        self.write_status(rs, status)


def _deletion_rank(pod: Obj) -> tuple[Any, ...]:
    """controller.ActivePods' order: the pods to delete first sort first (unassigned,
    pending, not ready, then the newest)."""
    status = pod.get("status") or {}
    created = pod["metadata"].get("creationTimestamp", "")
    return (bool((pod.get("spec") or {}).get("nodeName")), _PHASE_RANK.get(status.get("phase"), 1),
            is_ready(pod), _Reverse(created))


class _Reverse:
    """Sorts its value in descending order inside an ascending tuple sort."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: "_Reverse") -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and self.value == other.value


# --- deployments -----------------------------------------------------------------------

def _revision(rs: Obj) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _without_hash(template: Obj) -> Obj:
    t = copy.deepcopy(template or {})
    (t.get("metadata") or {}).get("labels", {}).pop(HASH_LABEL, None)
    return t


def surge_and_unavailable(deploy: Obj) -> tuple[int, int]:
    """deploymentutil.ResolveFenceposts: maxSurge rounded up, maxUnavailable down, never
    both 0."""
    replicas = _replicas(deploy)
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    surge = int_or_percent(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = int_or_percent(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(deploy: Obj) -> int:
    replicas = _replicas(deploy)
    if replicas == 0:
        return 0
    return min(surge_and_unavailable(deploy)[1], replicas)


class DeploymentController(WorkloadController):
    """Its children are ReplicaSets; its own `reconcile` (paused, Recreate, RollingUpdate)."""

    name = "deployment-controller"
    owner_type = DEPLOY
    child_type = RS

    def __init__(self, cluster: Any, gc: Any) -> None:
        super().__init__(cluster, gc)
        self.watch(POD, self._on_pod)

    def _on_pod(self, change: Change) -> None:
        """Recreate waits until the old pods are gone, not only terminating."""
        if change.type != "DELETED":
            return
        ref = controller_of(change.new)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.store.find(RS, change.new["metadata"]["namespace"], ref["name"])
        owner = controller_of(rs)
        if owner is not None and owner.get("kind") == "Deployment":
            self.enqueue((change.new["metadata"]["namespace"], owner["name"]))

    # --- sync ------------------------------------------------------------------------

    def reconcile(self, key: Key) -> None:
        ns, name = key
        d = self.store.find(DEPLOY, ns, name)
        if d is None:
            return
        sets = self.owned(d)
        template = (d.get("spec") or {}).get("template") or {}
        new_rs = next((rs for rs in sets if _without_hash(rs["spec"].get("template")) == template), None)
        old = [rs for rs in sets if rs is not new_rs]
        created = False
        if d["metadata"].get("deletionTimestamp") or (d.get("spec") or {}).get("paused"):
            self._sync_status(d, new_rs, old, created)
            return
        if (d["spec"].get("strategy") or {}).get("type") == "Recreate":
            for rs in old:
                if _replicas(rs) > 0:
                    self._scale(d, rs, 0)
            if any((p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   for rs in old for p in self.gc.dependents(rs, POD)):
                self._sync_status(d, new_rs, self._current(old), created)
                return
            if new_rs is None:
                new_rs, created = self._new_replica_set(d, old, _replicas(d)), True
            elif _replicas(new_rs) != _replicas(d):
                new_rs = self._scale(d, new_rs, _replicas(d))
        else:
            if new_rs is None:
                new_rs, created = self._new_replica_set(d, old, self._new_rs_replicas(d, old, None)), True
            else:
                new_rs = self._rolling_new(d, new_rs, old)
            old = self._rolling_old(d, new_rs, self._current(old))
        if new_rs is not None:
            new_rs = self._sync_revision(d, new_rs, old)
        self._cleanup(d, self._current(old))
        self._sync_status(d, new_rs, self._current(old), created)

    def _current(self, sets: list[Obj]) -> list[Obj]:
        return [rs for rs in (self.store.find(RS, rs["metadata"]["namespace"], rs["metadata"]["name"])
                              for rs in sets) if rs is not None]

    def _new_rs_replicas(self, d: Obj, old: list[Obj], new_rs: Obj | None) -> int:
        """deploymentutil.NewRSNewReplicas for RollingUpdate."""
        surge, _ = surge_and_unavailable(d)
        current = sum(_replicas(rs) for rs in old) + (_replicas(new_rs) if new_rs else 0)
        have = _replicas(new_rs) if new_rs else 0
        total = _replicas(d) + surge
        if current >= total:
            return have
        return have + min(total - current, _replicas(d) - have)

    def _rolling_new(self, d: Obj, new_rs: Obj, old: list[Obj]) -> Obj:
        want = _replicas(d)
        if _replicas(new_rs) > want:
            return self._scale(d, new_rs, want)
        if _replicas(new_rs) < want:
            count = self._new_rs_replicas(d, old, new_rs)
            if count != _replicas(new_rs):
                return self._scale(d, new_rs, count)
        return new_rs

    def _rolling_old(self, d: Obj, new_rs: Obj, old: list[Obj]) -> list[Obj]:
        """reconcileOldReplicaSets: unhealthy old pods first, then old ones while enough
        pods stay available."""
        old_count = sum(_replicas(rs) for rs in old)
        if old_count == 0:
            return old
        _, unavailable = surge_and_unavailable(d)
        min_available = _replicas(d) - unavailable
        all_count = old_count + _replicas(new_rs)
        new_unavailable = _replicas(new_rs) - _status(new_rs, "availableReplicas")
        budget = all_count - min_available - new_unavailable
        if budget <= 0:
            return old
        old = sorted(old, key=lambda rs: rs["metadata"].get("creationTimestamp", ""))
        done = 0
        for i, rs in enumerate(old):
            if done >= budget or _replicas(rs) == 0 or _status(rs, "availableReplicas") == _replicas(rs):
                continue
            cut = min(budget - done, _replicas(rs) - _status(rs, "availableReplicas"))
            old[i] = self._scale(d, rs, _replicas(rs) - cut)
            done += cut
        available = sum(_status(rs, "availableReplicas") for rs in old) + _status(new_rs, "availableReplicas")
        if available <= min_available:
            return old
        total, done = available - min_available, 0
        for i, rs in enumerate(old):
            if done >= total:
                break
            if _replicas(rs) == 0:
                continue
            cut = min(_replicas(rs), total - done)
            old[i] = self._scale(d, rs, _replicas(rs) - cut)
            done += cut
        return old

    def _new_replica_set(self, d: Obj, old: list[Obj], replicas: int) -> Obj:
        ns = d["metadata"]["namespace"]
        template = copy.deepcopy(d["spec"]["template"])
        collisions = int((d.get("status") or {}).get("collisionCount") or 0)
        digest = compute_hash(template, collisions)
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = digest
        selector = copy.deepcopy(d["spec"]["selector"])
        selector.setdefault("matchLabels", {})[HASH_LABEL] = digest
        surge, _ = surge_and_unavailable(d)
        revision = max((_revision(rs) for rs in old), default=0) + 1
        rs: Obj = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": f"{d['metadata']['name']}-{digest}", "namespace": ns,
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {DESIRED: str(_replicas(d)), MAX_REPLICAS: str(_replicas(d) + surge),
                                REVISION: str(revision)},
                "ownerReferences": [owner_reference(d)],
            },
            "spec": {"replicas": replicas, "minReadySeconds": int(d["spec"].get("minReadySeconds") or 0),
                     "selector": selector, "template": template},
        }
        try:
            created = self.cluster.create(RS, rs, ns)
        except ApiError as e:
            if e.code != 409:
                raise
            # a set of that name with another template: hash again with one more collision
            self.store.update(DEPLOY, ns, d["metadata"]["name"], lambda o: o.setdefault("status", {}).__setitem__(
                "collisionCount", collisions + 1))
            raise errors.conflict("replicasets", rs["metadata"]["name"], "apps") from None
        record(self.cluster, d, "ScalingReplicaSet",
               f"Scaled up replica set {created['metadata']['name']} from 0 to {replicas}", self.name)
        return created

    def _scale(self, d: Obj, rs: Obj, replicas: int) -> Obj:
        before = _replicas(rs)
        surge, _ = surge_and_unavailable(d)

        def scale(o: Obj) -> None:
            if o["spec"].get("replicas") != replicas:
                o["metadata"]["generation"] = o["metadata"].get("generation", 1) + 1
            o["spec"]["replicas"] = replicas
            annotations = o["metadata"].setdefault("annotations", {})
            annotations[DESIRED] = str(_replicas(d))
            annotations[MAX_REPLICAS] = str(_replicas(d) + surge)

        updated = self.store.update(RS, rs["metadata"]["namespace"], rs["metadata"]["name"], scale)
        if before != replicas:
            direction = "up" if replicas > before else "down"
            record(self.cluster, d, "ScalingReplicaSet",
                   f"Scaled {direction} replica set {rs['metadata']['name']} from {before} to {replicas}", self.name)
        return updated

    def _sync_revision(self, d: Obj, new_rs: Obj, old: list[Obj]) -> Obj:
        """The new set's revision is one above every old one's (a template rolled back to
        gets a new number); the deployment carries the same."""
        wanted = max(max((_revision(rs) for rs in old), default=0) + 1, _revision(new_rs))
        if _revision(new_rs) != wanted:
            new_rs = self.store.update(RS, new_rs["metadata"]["namespace"], new_rs["metadata"]["name"],
                                       lambda o: o["metadata"].setdefault("annotations", {}).__setitem__(
                                           REVISION, str(wanted)))
        if (d["metadata"].get("annotations") or {}).get(REVISION) != str(wanted):
            self.store.update(DEPLOY, d["metadata"]["namespace"], d["metadata"]["name"],
                              lambda o: o["metadata"].setdefault("annotations", {}).__setitem__(REVISION, str(wanted)))
        return new_rs

    def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        """Delete the oldest empty old sets beyond revisionHistoryLimit."""
        limit = (d.get("spec") or {}).get("revisionHistoryLimit")
        if limit is None:
            return
        empty = sorted((rs for rs in old if _replicas(rs) == 0 and _status(rs, "replicas") == 0
                        and not rs["metadata"].get("deletionTimestamp")), key=_revision)
        for rs in empty[:max(0, len(old) - int(limit))]:
            self.store.delete(RS, rs["metadata"]["namespace"], rs["metadata"]["name"], uid=rs["metadata"]["uid"])

    def _sync_status(self, d: Obj, new_rs: Obj | None, old: list[Obj], created: bool) -> None:
        sets = ([new_rs] if new_rs is not None else []) + old
        replicas = _replicas(d)
        available = sum(_status(rs, "availableReplicas") for rs in sets)
        updated = _status(new_rs, "replicas") if new_rs is not None else 0
        actual = sum(_status(rs, "replicas") for rs in sets)
        previous = d.get("status") or {}
        status = drop_zeros({
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": actual,
            "updatedReplicas": updated,
            "readyReplicas": sum(_status(rs, "readyReplicas") for rs in sets),
            "availableReplicas": available,
            "unavailableReplicas": max(0, sum(_replicas(rs) for rs in sets) - available),
            "collisionCount": previous.get("collisionCount"),
        })
        conditions = {c["type"]: c for c in previous.get("conditions") or []}
        if available >= replicas - max_unavailable(d):
            _set_condition(conditions, "Available", "True", "MinimumReplicasAvailable",
                           "Deployment has minimum availability.")
        else:
            _set_condition(conditions, "Available", "False", "MinimumReplicasUnavailable",
                           "Deployment does not have minimum availability.")
        if new_rs is not None:
            rs_name = new_rs["metadata"]["name"]
            if created:
                _set_condition(conditions, "Progressing", "True", "NewReplicaSetCreated",
                               f'Created new replica set "{rs_name}"')
            elif updated == replicas and actual == replicas and available >= replicas:
                _set_condition(conditions, "Progressing", "True", "NewReplicaSetAvailable",
                               f'ReplicaSet "{rs_name}" has successfully progressed.')
            else:
                _set_condition(conditions, "Progressing", "True", "ReplicaSetUpdated",
                               f'ReplicaSet "{rs_name}" is progressing.')
        status["conditions"] = [conditions[t] for t in ("Available", "Progressing") if t in conditions]
        self.write_status(d, status)


def _set_condition(conditions: dict[str, Obj], type_: str, status: str, reason: str, message: str) -> None:
    """A deployment condition: lastUpdateTime moves when anything changes,
    lastTransitionTime only when the status does."""
    old = conditions.get(type_)
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return
    stamp = rfc3339()
    since = old["lastTransitionTime"] if old is not None and old.get("status") == status else stamp
    conditions[type_] = {"type": type_, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": since,
                         "reason": reason, "message": message}
