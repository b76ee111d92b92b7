"""What the workload controllers (ReplicaSet, Deployment, StatefulSet, DaemonSet) share:
pod states as kubectl and the controllers read them, pods made from a template, the
template hash, int-or-percent values and the events the controllers record."""

from __future__ import annotations

import copy
import json
import logging
import math
from typing import Any

from jupyterhub_gpu_reclaim.timestamps import parse_time, utcnow

from .controller import owner_reference
from .errors import ApiError
from .store import Obj

log = logging.getLogger("gpu_reclaim_sim.workloads")

_SAFE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet


def is_active(pod: Obj) -> bool:
    """controller.IsPodActive: not finished and not being deleted."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") \
        and not pod["metadata"].get("deletionTimestamp")


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
