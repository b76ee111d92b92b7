"""The cluster's state: an in-memory object store with resource versions and watches.

It plays etcd plus the apiserver's watch cache. Every write stores a new dict and bumps
one global resourceVersion; the dicts it hands out are snapshots that nobody mutates
(use `update()` to change an object). Watches replay retained history from a
resourceVersion and then follow live changes; a resourceVersion older than the retained
history is refused with 410 Expired, as after an etcd compaction. Deleting a namespace,
and refusing new content in one being deleted, is sim.namespaces' part of a write.
"""

from __future__ import annotations

import asyncio
import builtins  # in Store's body, `list` is its method
import datetime as dt
import ipaddress
import json
import logging
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable


from .api.timestamps import parse_time, utcnow
from . import errors, namespaces
from .resources import ResourceType
from .selectors import label_matcher, parse_field_selector
from .api.timestamps import rfc3339

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Subscriber = Callable[["Change"], None]

log = logging.getLogger("gpu_reclaim_sim.store")

_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet
# DeleteOptions.propagationPolicy -> the finalizer the apiserver puts on the owner
PROPAGATION_FINALIZERS = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}


@dataclass
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rtype: ResourceType
    old: Obj | None
    new: Obj


class Filter:
    """Which objects of one resource a watch or list selects."""

    def __init__(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace or None
        self._labels = label_matcher(label_selector)
        self._fields = parse_field_selector(field_selector, rtype.field_labels, rtype.plural)

    def __call__(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        for label, equal, value in self._fields:
            if (self.rtype.field_value(obj, label) == value) != equal:
                return False
        return self._labels(meta.get("labels") or {})


class Watch:
    """One watcher: a queue of (type, object) the store fills as changes happen."""

    def __init__(self, store: "Store", flt: Filter) -> None:
        self.store = store
        self.filter = flt
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        self.closed = False

    def offer(self, change: Change) -> None:
        """Translate a change into what this watcher sees, as the watch cache does:
        an object that stops matching the selector is DELETED for it, one that starts is ADDED."""
        if change.rtype is not self.filter.rtype or self.closed:
            return
        if change.type == "DELETED":
            if self.filter(change.new):
                self.queue.put_nowait(("DELETED", change.new))
            return
        was, now_ = self.filter(change.old), self.filter(change.new)
        if was and now_:
            self.queue.put_nowait(("MODIFIED", change.new))
        elif now_:
            self.queue.put_nowait(("ADDED", change.new))
        elif was:
            self.queue.put_nowait(("DELETED", change.new))

    async def next(self, timeout: float | None = None) -> tuple[str, Obj] | None:
        """The next event, or None when the timeout passes or the watch is closed."""
        if self.closed and self.queue.empty():
            return None
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.store._watches.discard(self)
            self.queue.put_nowait(None)

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> tuple[str, Obj]:
        item = await self.queue.get() if not (self.closed and self.queue.empty()) else None
        if item is None:
            raise StopAsyncIteration
        return item


class Store:
    def __init__(self, history_limit: int = 20000) -> None:
        self.rv = 1
        self.history_limit = history_limit
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._history: deque[Change] = deque()
        self._compacted_rv = 1  # watches must start at or after this
        self._watches: set[Watch] = set()
        self._removal_timers: dict[tuple[str, Key], asyncio.TimerHandle] = {}
        self._encoded: dict[str, dict[Key, tuple[Obj, bytes]]] = {}  # the JSON of each stored version
        self._sorted: dict[str, list[Key]] = {}  # a bucket's keys in order, until one comes or goes
        # per resource: the resourceVersion of its last change (what a cached list depends on)
        self.revisions: dict[str, int] = {}
        # nodes whose kubelet removes its pods itself once their containers have stopped
        self.kubelet_nodes: set[str] = set()
        # the apiserver's --service-cluster-ip-range (a cluster sets its own free /16)
        self.service_cidr = ipaddress.IPv4Network("127.96.0.0/16")
        # the apiserver's informers, called synchronously with each change (see `subscribe`)
        self._subscribers: dict[str | None, list[Subscriber]] = {}

    # --- reading -------------------------------------------------------------------

    def _bucket(self, rtype: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rtype.plural, {})

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._bucket(rtype).get((namespace or "" if rtype.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rtype.plural, name, rtype.group)
        return obj

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self._bucket(rtype).get((namespace or "" if rtype.namespaced else "", name))

    def list(self, flt: Filter) -> tuple[list[Obj], str]:
        """Matching objects in key order (namespace, name), and the list's resourceVersion."""
        bucket = self._bucket(flt.rtype)
        return [bucket[k] for k in self._matching_keys(flt)], str(self.rv)

    def list_encoded(self, flt: Filter) -> tuple[builtins.list[Key], builtins.list[bytes]]:
        """The keys of `list`'s objects, and each object's JSON (`encoded`)."""
        bucket = self._bucket(flt.rtype)
        cache = self._encoded.setdefault(flt.rtype.plural, {})
        keys = self._matching_keys(flt)
        out = []
        for k in keys:
            obj, hit = bucket[k], cache.get(k)
            out.append(hit[1] if hit is not None and hit[0] is obj else self._encode(cache, k, obj))
        return keys, out

    def _matching_keys(self, flt: Filter) -> builtins.list[Key]:
        bucket = self._bucket(flt.rtype)
        keys = self._sorted.get(flt.rtype.plural)
        if keys is None:
            keys = self._sorted[flt.rtype.plural] = sorted(bucket)
        if flt._fields:
            return [k for k in keys if flt(bucket[k])]
        # the common case, in one pass: a namespace (the key's first part) and labels
        ns, labels = flt.namespace, flt._labels
        return [k for k in keys if (not ns or k[0] == ns) and labels(bucket[k]["metadata"].get("labels") or {})]

    def encoded(self, rtype: ResourceType, obj: Obj) -> bytes:
        """The object as compact JSON. Stored versions never change, so each is encoded
        once, however many lists and watches send it."""
        key = _key(rtype, obj)
        cache = self._encoded.setdefault(rtype.plural, {})
        hit = cache.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        if self._bucket(rtype).get(key) is not obj:  # an old or final version: not kept
            return json.dumps(obj, separators=(",", ":")).encode()
        return self._encode(cache, key, obj)

    @staticmethod
    def _encode(cache: dict[Key, tuple[Obj, bytes]], key: Key, obj: Obj) -> bytes:
        data = json.dumps(obj, separators=(",", ":")).encode()
        cache[key] = (obj, data)
        return data

    def objects(self, rtype: ResourceType) -> Iterable[Obj]:
        return list(self._bucket(rtype).values())

    # --- writing -------------------------------------------------------------------

    def _commit(self, rtype: ResourceType, type_: str, old: Obj | None, new: Obj) -> Obj:
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        key = _key(rtype, new)
        self.revisions[rtype.plural] = self.rv
        bucket = self._bucket(rtype)
        self._encoded.get(rtype.plural, {}).pop(key, None)  # the old version's JSON goes with it
        if type_ == "DELETED":
            bucket.pop(key, None)
            self._sorted.pop(rtype.plural, None)
        else:
            if key not in bucket:
                self._sorted.pop(rtype.plural, None)
            bucket[key] = new
        change = Change(self.rv, type_, rtype, old, new)
        self._history.append(change)
        while len(self._history) > self.history_limit:
            self._compacted_rv = self._history.popleft().rv
        for w in list(self._watches):
            w.offer(change)
        for subscribers in (self._subscribers.get(rtype.plural), self._subscribers.get(None)):
            for callback in subscribers or ():
                try:
                    callback(change)
                except Exception:  # a controller's bug must not fail the write that fed it
                    log.exception("subscriber %r failed on %s %s", callback, type_, rtype.plural)
        return new

    def create(self, rtype: ResourceType, obj: Obj, namespace: str | None = None) -> Obj:
        """Store a new object, filling the server-side metadata. The caller has validated it."""
        obj = copy_json(obj)
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            ns = meta.get("namespace") or namespace or "default"
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            if rtype.plural != "namespaces":
                namespaces.check(self, rtype, ns, meta.get("name") or "")
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(rtype.kind, "", [{
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name"}], rtype.group)
            meta["name"] = prefix + "".join(
                _GENERATE_CHARS[b % len(_GENERATE_CHARS)] for b in uuid.uuid4().bytes[:5]
            )
        if _key(rtype, obj) in self._bucket(rtype):
            raise errors.already_exists(rtype.plural, meta["name"], rtype.group)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339()
        meta.pop("deletionTimestamp", None)
        meta.setdefault("generation", 1) if "spec" in obj else None
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        return self._commit(rtype, "ADDED", None, obj)

    def replace(self, rtype: ResourceType, obj: Obj) -> Obj:
        """Store a new version of an existing object (PUT). A stale resourceVersion conflicts."""
        meta = obj["metadata"]
        current = self.get(rtype, meta.get("namespace"), meta["name"])
        rv = meta.get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, meta["name"], rtype.group)
        obj = copy_json(obj)
        cmeta = current["metadata"]
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "namespace"):
            if immutable in cmeta:
                obj["metadata"][immutable] = cmeta[immutable]
        if obj.get("spec") != current.get("spec"):
            obj["metadata"]["generation"] = cmeta.get("generation", 1) + 1
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        if obj == current:
            return current  # a no-op write does not bump the resourceVersion
        new = self._commit(rtype, "MODIFIED", current, obj)
        self._maybe_finalize(rtype, new, current)
        return new

    def update(
        self, rtype: ResourceType, namespace: str | None, name: str,
        mutate: Callable[[Obj], Any],
    ) -> Obj:
        """Change an object in place of the controllers: `mutate` edits a copy."""
        current = self.get(rtype, namespace, name)
        obj = copy_json(current)
        mutate(obj)
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if obj == current:
            return current
        new = self._commit(rtype, "MODIFIED", current, obj)
        self._maybe_finalize(rtype, new, current)
        return new

    def delete(
        self, rtype: ResourceType, namespace: str | None, name: str,
        grace_period_seconds: int | None = None, uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> tuple[Obj, bool]:
        """Delete, gracefully for pods on a node. Returns (object, finished?).

        `propagation_policy` Orphan or Foreground puts the `orphan` or
        `foregroundDeletion` finalizer on the object, for the garbage collector
        (sim.controllers.gc) to act on; Background (the default) deletes the object now and leaves
        its dependents to the collector."""
        current = self.get(rtype, namespace, name)
        meta = current["metadata"]
        if uid and meta["uid"] != uid:
            raise errors.conflict(rtype.plural, name, rtype.group)
        finalizer = PROPAGATION_FINALIZERS.get(propagation_policy or "")
        if finalizer and rtype.plural not in ("pods", "namespaces"):
            def mark(o: Obj) -> None:
                m = o["metadata"]
                m.setdefault("deletionTimestamp", rfc3339())
                m.setdefault("deletionGracePeriodSeconds", 0)
                if finalizer not in m.setdefault("finalizers", []):
                    m["finalizers"].append(finalizer)

            return self.update(rtype, namespace, name, mark), False
        if rtype.plural == "pods":
            spec = current.get("spec", {})
            grace = grace_period_seconds
            if grace is None:
                grace = meta.get("deletionGracePeriodSeconds",
                                 spec.get("terminationGracePeriodSeconds", 30))
            # a pod never bound to a node, or one that has finished, goes at once
            if not spec.get("nodeName") or current.get("status", {}).get("phase") in (
                "Succeeded", "Failed"
            ):
                grace = 0
            if grace > 0:
                return self._begin_graceful(rtype, current, int(grace)), False
        if rtype.plural == "namespaces":
            return namespaces.terminate(self, current), False
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                current = self.update(rtype, namespace, name,
                                      lambda o: o["metadata"].__setitem__("deletionTimestamp", rfc3339()))
            return current, False
        return self.remove(rtype, namespace, name), True

    def _begin_graceful(self, rtype: ResourceType, current: Obj, grace: int) -> Obj:
        meta = current["metadata"]
        deadline = utcnow() + dt.timedelta(seconds=grace)
        marked = parse_time(meta.get("deletionTimestamp"))
        if marked is not None and marked <= deadline:
            return current  # already terminating, no later than asked

        def mark(o: Obj) -> None:
            o["metadata"]["deletionTimestamp"] = rfc3339(deadline)
            o["metadata"]["deletionGracePeriodSeconds"] = grace

        obj = self.update(rtype, meta.get("namespace"), meta["name"], mark)
        self._schedule_removal(rtype, obj, grace)
        return obj

    def _schedule_removal(self, rtype: ResourceType, obj: Obj, delay: float) -> None:
        """Remove a pod after its grace period when no kubelet runs it (the pod garbage
        collector's job for pods of gone nodes); a live kubelet does the final delete
        itself, only after its containers have stopped and their GPUs are free."""
        if obj.get("spec", {}).get("nodeName") in self.kubelet_nodes:
            return
        key = (rtype.plural, _key(rtype, obj))
        uid = obj["metadata"]["uid"]
        if (old := self._removal_timers.pop(key, None)) is not None:
            old.cancel()

        def fire() -> None:
            self._removal_timers.pop(key, None)
            cur = self.find(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if cur is not None and cur["metadata"]["uid"] == uid:
                self.remove(rtype, cur["metadata"].get("namespace"), cur["metadata"]["name"])

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._removal_timers[key] = loop.call_later(delay, fire)

    def _maybe_finalize(self, rtype: ResourceType, obj: Obj, old: Obj) -> None:
        """An object being deleted goes once its last finalizer is removed (the list
        emptied or dropped); a pod still in its grace period waits for its kubelet."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers") or not old["metadata"].get("finalizers"):
            return
        if rtype.plural == "pods" and meta.get("deletionGracePeriodSeconds"):
            return
        self.remove(rtype, meta.get("namespace"), meta["name"])

    def remove(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        """Take the object out for good: the DELETED event."""
        current = self.get(rtype, namespace, name)
        key = (rtype.plural, _key(rtype, current))
        if (timer := self._removal_timers.pop(key, None)) is not None:
            timer.cancel()
        # stored versions are never mutated, so the final one may share all but metadata
        obj = {**current, "metadata": dict(current["metadata"])}
        new = self._commit(rtype, "DELETED", current, obj)
        ns = current["metadata"].get("namespace")
        if ns and rtype.plural != "namespaces":
            namespaces.remove_if_empty(self, ns)
        return new

    # --- watching ------------------------------------------------------------------

    def subscribe(self, rtype: ResourceType | None, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(change)` after every change of `rtype` (every type: None), inside
        the write. It is how the controllers' informers learn of changes without a queue
        of objects per watcher: the callback must be cheap; the workload controllers only
        note keys to reconcile later, the RBAC index drops its cache, and the role
        aggregation and service account controllers write at once (as their informers
        would have, a moment later). Returns the function that unsubscribes."""
        subscribers = self._subscribers.setdefault(rtype.plural if rtype else None, [])
        subscribers.append(callback)
        return lambda: subscribers.remove(callback) if callback in subscribers else None

    def watch(self, flt: Filter, resource_version: str | None = None) -> Watch:
        """Start a watch. An unset or "0" resourceVersion first sends every matching object
        as ADDED (the apiserver's "any" semantics); otherwise history after it is replayed."""
        w = Watch(self, flt)
        if not resource_version or resource_version == "0":
            for obj in self.list(flt)[0]:
                w.queue.put_nowait(("ADDED", obj))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version!r}") from None
            if since < self._compacted_rv:
                raise errors.expired(since)
            for change in self._history:
                if change.rv > since:
                    w.offer(change)
        self._watches.add(w)
        return w

    def compact(self) -> int:
        """Drop the retained history (like etcd compaction); older watches get 410."""
        self._history.clear()
        self._compacted_rv = self.rv
        return self.rv

    def close(self) -> None:
        for timer in self._removal_timers.values():
            timer.cancel()
        self._removal_timers.clear()
        for w in list(self._watches):
            w.close()


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (what every stored object is), three times as fast as
    `copy.deepcopy`, which the store's writes spent a tenth of the simulator's time in."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def _key(rtype: ResourceType, obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "" if rtype.namespaced else "", meta["name"])
