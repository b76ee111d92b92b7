"""The garbage collector: objects go with their owners, as kube-controller-manager's does.

It keeps an index from each owner's uid to its dependents (objects whose
`metadata.ownerReferences` name it), fed by every store write, and acts as the real
collector does (pkg/controller/garbagecollector):
- **Background** (the default of a DELETE): the owner goes at once; a dependent whose
  owners are all gone is then deleted (pods gracefully, through their kubelet); one that
  still has an owner loses the reference to the gone one.
- **Foreground**: the owner stays with `deletionTimestamp` and the `foregroundDeletion`
  finalizer until its dependents with `blockOwnerDeletion: true` are gone; the collector
  deletes the dependents and then removes the finalizer.
- **Orphan**: the owner stays with the `orphan` finalizer until the collector has removed
  the references to it from its dependents, which stay.
A dependent created with an owner that does not exist (anymore) is collected too.

Controllers use the same index to find what they own (`dependents`).
"""

from __future__ import annotations

import logging
from typing import Any, Hashable, Iterable

from .controller import Controller
from ..resources import ALL, BY_KIND, ResourceType, lookup
from ..store import Change, Obj

log = logging.getLogger("gpu_reclaim_sim.controllers.gc")

Ref = tuple[str, str, str, str]  # (group, plural, namespace or "", name)
ORPHAN, FOREGROUND = "orphan", "foregroundDeletion"


def ref_of(rtype: ResourceType, obj: Obj) -> Ref:
    meta = obj["metadata"]
    return (rtype.group, rtype.plural, meta.get("namespace") or "", meta["name"])


def _owner_uids(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    return {r.get("uid") for r in obj["metadata"].get("ownerReferences") or () if r.get("uid")}


class GarbageCollector(Controller):
    name = "garbage-collector"

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self._dependents: dict[str, set[Ref]] = {}
        self.watch(None, self._on_change)

    # --- the index -------------------------------------------------------------------

    def initial_keys(self) -> list[Hashable]:
        keys: list[Hashable] = []
        for rtype in ALL:
            for obj in self.store.objects(rtype):
                ref = ref_of(rtype, obj)
                for uid in _owner_uids(obj):
                    self._dependents.setdefault(uid, set()).add(ref)
                if _owner_uids(obj):
                    keys.append(("dependent", ref))
        return keys

    def dependents(self, owner: Obj, rtype: ResourceType | None = None) -> list[Obj]:
        """The objects (of `rtype`, or any) that name `owner` among their owners."""
        out = []
        uid = owner["metadata"]["uid"]
        for group, plural, ns, name in list(self._dependents.get(uid, ())):
            if rtype is not None and (group, plural) != (rtype.group, rtype.plural):
                continue
            dep_type = lookup(group, plural)
            obj = self.store.find(dep_type, ns or None, name) if dep_type else None
            if obj is not None and uid in _owner_uids(obj):
                out.append(obj)
        return out

    def _on_change(self, change: Change) -> None:
        ref = ref_of(change.rtype, change.new)
        before = _owner_uids(change.old)
        after = set() if change.type == "DELETED" else _owner_uids(change.new)
        for uid in before - after:
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self._dependents[uid]
        for uid in after - before:
            self._dependents.setdefault(uid, set()).add(ref)
        meta = change.new["metadata"]
        if change.type == "DELETED":
            for dep in self._dependents.get(meta.get("uid", ""), ()):
                self.enqueue(("dependent", dep))
            # an owner deleting in the foreground may be waiting for this one
            for owner in self._owner_refs(change.new):
                self.enqueue(("owner", owner))
        elif change.type == "ADDED" and after:
            self.enqueue(("dependent", ref))  # its owner may be gone already
        elif meta.get("deletionTimestamp") and {ORPHAN, FOREGROUND} & set(meta.get("finalizers") or ()):
            self.enqueue(("owner", ref))

    def _owner_refs(self, obj: Obj) -> Iterable[Ref]:
        ns = obj["metadata"].get("namespace") or ""
        for r in obj["metadata"].get("ownerReferences") or ():
            rtype = BY_KIND.get(r.get("kind", ""))
            if rtype is not None:
                yield (rtype.group, rtype.plural, ns if rtype.namespaced else "", r.get("name", ""))

    # --- collecting --------------------------------------------------------------------

    def reconcile(self, key: tuple[str, Ref]) -> None:
        what, (group, plural, ns, name) = key
        rtype = lookup(group, plural)
        obj = self.store.find(rtype, ns or None, name) if rtype else None
        if obj is None or rtype is None:
            return
        if what == "owner":
            self._finish_owner(rtype, obj)
        else:
            self._collect(rtype, obj)

    def _owner_state(self, ref: dict[str, Any], namespace: str) -> str:
        """"absent", "waiting" (deleting in the foreground) or "solid"."""
        rtype = BY_KIND.get(ref.get("kind", ""))
        if rtype is None or ref.get("apiVersion") != rtype.api_version:
            return "solid"  # a kind this cluster does not serve: never collect on its account
        owner = self.store.find(rtype, namespace if rtype.namespaced else None, ref.get("name", ""))
        if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
            return "absent"
        meta = owner["metadata"]
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or ()):
            return "waiting"
        return "solid"

    def _collect(self, rtype: ResourceType, obj: Obj) -> None:
        """attemptToDeleteItem: delete a dependent whose owners are gone."""
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if not refs or meta.get("deletionTimestamp"):
            return
        ns = meta.get("namespace") or ""
        states = {r.get("uid"): self._owner_state(r, ns) for r in refs}
        if "solid" in states.values():
            gone = {uid for uid, state in states.items() if state != "solid"}
            if gone:
                self.store.update(rtype, ns or None, meta["name"], lambda o: o["metadata"].__setitem__(
                    "ownerReferences", [r for r in o["metadata"]["ownerReferences"] if r.get("uid") not in gone]))
            return
        policy = "Background"
        if "waiting" in states.values() and self._dependents.get(meta["uid"]):
            policy = "Foreground"
        log.debug("gc: deleting %s %s/%s (%s)", rtype.kind, ns, meta["name"], policy)
        self.store.delete(rtype, ns or None, meta["name"], uid=meta["uid"], propagation_policy=policy)

    def _finish_owner(self, rtype: ResourceType, obj: Obj) -> None:
        """An owner deleting with the orphan or foregroundDeletion finalizer."""
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp"):
            return
        uid = meta["uid"]
        if ORPHAN in finalizers:
            for dep in self.dependents(obj):
                dep_type = BY_KIND[dep["kind"]]
                self.store.update(dep_type, dep["metadata"].get("namespace"), dep["metadata"]["name"],
                                  lambda o: o["metadata"].__setitem__("ownerReferences", [
                                      r for r in o["metadata"]["ownerReferences"] if r.get("uid") != uid]))
            self._drop_finalizer(rtype, obj, ORPHAN)
        elif FOREGROUND in finalizers:
            blocking = False
            for dep in self.dependents(obj):
                if not dep["metadata"].get("deletionTimestamp"):
                    self._collect(BY_KIND[dep["kind"]], dep)
                if any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                       for r in dep["metadata"].get("ownerReferences") or ()):
                    blocking = True
            if not blocking:
                self._drop_finalizer(rtype, obj, FOREGROUND)

    def _drop_finalizer(self, rtype: ResourceType, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        self.store.update(rtype, meta.get("namespace"), meta["name"], lambda o: o["metadata"].__setitem__(
            "finalizers", [f for f in o["metadata"].get("finalizers") or [] if f != finalizer]))
