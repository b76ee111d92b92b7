"""Taints and tolerations, as the API documents a Toleration
(https://kubernetes.io/docs/reference/kubernetes-api/definitions/toleration-v1/ and
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/):

- "The pod this Toleration is attached to tolerates any taint that matches the triple
  <key,value,effect> using the matching operator <operator>."
- effect: "Empty means match all taint effects."
- key: "Empty means match all taint keys. If the key is empty, operator must be Exists;
  this combination means to match all values and all keys."
- operator: "Exists and Equal. Defaults to Equal. Exists is equivalent to wildcard for
  value." (Lt and Gt sit behind an alpha feature gate, off by default: they match nothing.)"""

from __future__ import annotations

from typing import Any, Mapping

# the taint a cordoned node (`spec.unschedulable`) is treated as having (well-known taints:
# https://kubernetes.io/docs/reference/labels-annotations-taints/#node-kubernetes-io-unschedulable)
TAINT_UNSCHEDULABLE: Mapping[str, Any] = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != (taint.get("key") or ""):
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False
