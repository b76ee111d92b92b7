"""What the workload controllers (ReplicaSet, Deployment, StatefulSet, DaemonSet) share:
their base (`WorkloadController`: the owner's key, the informers, the children it
controls, the sync loop and the status write), pod states as kubectl and the controllers
read them, pods made from a template, the template hash, int-or-percent values and the
events the controllers record."""

from __future__ import annotations

import copy
import json
import logging
import math
from typing import Any, Hashable


from ..api.timestamps import parse_time, utcnow
from .controller import Controller, controller_of, owner_reference
from ..errors import ApiError
from ..resources import BY_KIND, ResourceType
from ..store import Change, Obj

log = logging.getLogger("gpu_reclaim_sim.controllers.workloads")

_SAFE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet
POD = BY_KIND["Pod"]
REVISION_LABEL = "controller-revision-hash"  # a StatefulSet's or DaemonSet's pod: its template's revision

Key = tuple[str, str]


def object_key(obj: Obj) -> Key:
    """A namespaced object's work-queue key (cache.MetaNamespaceKeyFunc)."""
    return (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])


class WorkloadController(Controller):
    """A controller of `owner_type` objects, each the controller owner of `child_type`
    objects (pods unless set otherwise), as pkg/controller's workload controllers are.

    It queues an owner when the owner changes and when a child it controls (by its
    ownerReference with `controller: true`) comes, changes or goes. `reconcile` is their
    sync: `sync_children` (not while the owner is being deleted), then `sync_status` over
    the children as they are afterwards, whether or not the first failed (as
    syncReplicaSet, syncDaemonSet and the StatefulSet's performUpdate write the status
    before they return the error, which requeues the owner with backoff)."""

    owner_type: ResourceType
    child_type: ResourceType = POD

    def __init__(self, cluster: Any, gc: Any) -> None:
        super().__init__(cluster)
        self.gc = gc
        self.watch(self.owner_type, lambda ch: self.enqueue(object_key(ch.new)))
        self.watch(self.child_type, self._on_child)

    def initial_keys(self) -> list[Hashable]:
        return [object_key(o) for o in self.store.objects(self.owner_type)]

    def _on_child(self, change: Change) -> None:
        for obj in (change.old, change.new):
            ref = controller_of(obj)
            if ref is not None and ref.get("kind") == self.owner_type.kind:
                self.enqueue((change.new["metadata"].get("namespace") or "", ref["name"]))

    def owned(self, owner: Obj) -> list[Obj]:
        """The children `owner` controls (not those it only owns)."""
        uid = owner["metadata"]["uid"]
        return [c for c in self.gc.dependents(owner, self.child_type) if (controller_of(c) or {}).get("uid") == uid]

    def reconcile(self, key: Key) -> None:
        owner = self.store.find(self.owner_type, *key)
        if owner is None:
            return
        failure: ApiError | None = None
        if not owner["metadata"].get("deletionTimestamp"):
            try:
                self.sync_children(owner, self.owned(owner))
            except ApiError as e:
                failure = e
        self.sync_status(owner, self.owned(owner))
        if failure is not None:
            raise failure

    def sync_children(self, owner: Obj, children: list[Obj]) -> None:
        raise NotImplementedError

    def sync_status(self, owner: Obj, children: list[Obj]) -> None:
        raise NotImplementedError

    def create_pod(self, owner: Obj, pod: Obj) -> Obj:
        """Create `pod` for `owner`, with the replica set and daemon set controllers'
        events; an `ApiError` is recorded and raised."""
        try:
            created: Obj = self.cluster.create(POD, pod, owner["metadata"]["namespace"])
        except ApiError as e:
            record(self.cluster, owner, "FailedCreate", f"Error creating: {e.message}", self.name, "Warning")
            raise
        record(self.cluster, owner, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}", self.name)
        return created

    def delete_pod(self, owner: Obj, pod: Obj) -> bool:
        """Delete this very pod (its uid as precondition); False when it was already
        gone. The event says so in `deleted_message`'s words."""
        meta = pod["metadata"]
        try:
            self.store.delete(POD, meta["namespace"], meta["name"], uid=meta["uid"])
        except ApiError as e:
            if e.code != 404:
                raise
            return False
        record(self.cluster, owner, "SuccessfulDelete", self.deleted_message(owner, pod), self.name)
        return True

    def deleted_message(self, owner: Obj, pod: Obj) -> str:
        return f"Deleted pod: {pod['metadata']['name']}"

    def count_available(self, owner: Obj, ready: list[Obj]) -> int:
        """How many of the `ready` pods are available (ready for the owner's
        `minReadySeconds`); the owner is reconciled again when the next one becomes so."""
        min_ready = int((owner.get("spec") or {}).get("minReadySeconds") or 0)
        available, wait = 0, None
        for pod in ready:
            left = available_in(pod, min_ready)
            if left == 0:
                available += 1
            elif left is not None:
                wait = left if wait is None else min(wait, left)
        if wait is not None:
            self.enqueue_after(object_key(owner), wait + 0.05)
        return available

    def write_status(self, owner: Obj, status: dict[str, Any]) -> None:
        """Replace the owner's status when it differs from `status`."""
        if status != (owner.get("status") or {}):
            meta = owner["metadata"]
            self.store.update(self.owner_type, meta["namespace"], meta["name"], lambda o: o.__setitem__("status", status))


def is_active(pod: Obj) -> bool:
    """controller.IsPodActive: not finished and not being deleted."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") \
        and not pod["metadata"].get("deletionTimestamp")


def pod_revision(pod: Obj) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)


def _ready_condition(pod: Obj) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c
    return None


def is_ready(pod: Obj) -> bool:
    cond = _ready_condition(pod)
    return cond is not None and cond.get("status") == "True"


def available_in(pod: Obj, min_ready_seconds: int) -> float | None:
    """Seconds until a ready pod counts as available (0: it is), None when not ready."""
    cond = _ready_condition(pod)
    if cond is None or cond.get("status") != "True":
        return None
    if not min_ready_seconds:
        return 0.0
    try:
        changed = parse_time(cond["lastTransitionTime"])
    except (KeyError, ValueError):
        return 0.0
    if changed is None:
        return 0.0
    return max(0.0, min_ready_seconds - (utcnow() - changed).total_seconds())


def compute_hash(template: Obj, collision_count: int = 0) -> str:
    """controller.ComputeHash's shape: FNV-32a of the template (here its canonical JSON, not
    Go's object dump, so the values differ from a real cluster's), plus the collision
    count, encoded with rand.SafeEncodeString."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += collision_count.to_bytes(4, "little")
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_CHARS[ord(c) % len(_SAFE_CHARS)] for c in str(h))


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def pod_from_template(owner: Obj, template: Obj, *, name: str | None = None,
                      labels: dict[str, str] | None = None) -> Obj:
    """controller.GetPodFromTemplate: the template's labels, annotations and spec, owned by
    `owner`; named `name` or generated from the owner's name."""
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "labels": {**(tmeta.get("labels") or {}), **(labels or {})},
        "ownerReferences": [owner_reference(owner)],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = owner["metadata"]["name"] + "-"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


def record(cluster: Any, obj: Obj, reason: str, message: str, component: str, type_: str = "Normal") -> None:
    """A controller's event about `obj`. One that cannot be stored (its namespace is
    going away) is dropped, as client-go's recorder drops what the server refuses."""
    try:
        cluster.events.record(obj, reason, message, type_=type_, component=component)
    except ApiError as e:
        log.debug("event %s on %s/%s dropped: %s", reason, obj["metadata"].get("namespace"),
                  obj["metadata"]["name"], e.message)


def drop_zeros(status: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Most status counters are `omitempty` in the Go types: a 0 is not sent (`keep`: the
    ones that are always sent)."""
    return {k: v for k, v in status.items() if k in keep or v not in (0, None, "", [])}
