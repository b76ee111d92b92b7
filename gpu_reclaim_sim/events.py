"""Recording core/v1 Events the way client-go's event recorder does.

An event repeating the same object, reason, message and source is folded into the
existing one (count + 1, lastTimestamp moved) instead of being created again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any


from .api.timestamps import parse_time, utcnow
from .resources import BY_KIND
from .store import Obj, Store
from .api.timestamps import rfc3339

EVENT = BY_KIND["Event"]


class EventRecorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, str, str, str, str], str] = {}

    def record(
        self,
        involved: Obj,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str,
        host: str | None = None,
        field_path: str | None = None,
    ) -> Obj:
        meta = involved["metadata"]
        ns = meta.get("namespace") or "default"
        key = (ns, meta.get("uid") or meta["name"], reason, message, f"{component}/{host}")
        name = self._index.get(key)
        if name is not None and self.store.find(EVENT, ns, name) is not None:
            def bump(o: Obj) -> None:
                o["count"] = o.get("count", 1) + 1
                o["lastTimestamp"] = rfc3339()

            return self.store.update(EVENT, ns, name, bump)
        event = event_body(involved, reason, message, type_=type_, component=component, host=host,
                           field_path=field_path)
        created = self.store.create(EVENT, event, ns)
        self._index[key] = created["metadata"]["name"]
        return created

    def expire(self, ttl: float) -> int:
        """Remove events not seen for `ttl` seconds, as etcd's lease on each event does
        (the apiserver's --event-ttl, 1 h by default). Returns how many went."""
        cutoff = utcnow() - dt.timedelta(seconds=ttl)
        gone = 0
        for ev in self.store.objects(EVENT):
            last = parse_time(ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp"))
            if last is not None and last < cutoff:
                self.store.remove(EVENT, ev["metadata"]["namespace"], ev["metadata"]["name"])
                gone += 1
        if gone:
            live = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in self.store.objects(EVENT)}
            self._index = {k: v for k, v in self._index.items() if (k[0], v) in live}
        return gone

    async def expire_forever(self, ttl: float) -> None:
        while True:
            await asyncio.sleep(min(ttl, 60.0))
            self.expire(ttl)


def event_body(involved: Obj, reason: str, message: str, *, type_: str, component: str, host: str | None,
               field_path: str | None) -> Obj:
    """A new core/v1 Event about `involved`, as client-go's recorder writes it."""
    meta = involved["metadata"]
    ns = meta.get("namespace") or "default"
    ref: dict[str, Any] = {
        "kind": involved.get("kind"),
        "namespace": ns,
        "name": meta["name"],
        "uid": meta.get("uid"),
        "apiVersion": involved.get("apiVersion", "v1"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if field_path:
        ref["fieldPath"] = field_path
    source = {"component": component, **({"host": host} if host else {})}
    stamp = rfc3339()
    return {
        "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": ns},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }
