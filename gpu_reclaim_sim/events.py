"""A core/v1 Event as client-go's event recorder writes it, for the node agent's parts that
record them (the pods' kubelet, the provisioner, the service controller); folding repeats
into a count is theirs (sim.nodeagent.apipodapi)."""

from __future__ import annotations

import time
from typing import Any

from .api.timestamps import rfc3339
from .objects import Obj

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
