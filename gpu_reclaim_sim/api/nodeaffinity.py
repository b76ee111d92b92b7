"""Node selector terms, as node affinity reads them (https://kubernetes.io/docs/concepts/
scheduling-eviction/assign-pod-node/#node-affinity and the NodeSelectorRequirement type):

- "If you specify multiple terms in nodeSelectorTerms associated with nodeAffinity types,
  then the Pod can be scheduled onto a node if one of the specified terms can be
  satisfied (terms are ORed)."
- "If you specify multiple expressions in a single matchExpressions field associated with a
  term in nodeSelectorTerms, then the Pod can be scheduled onto a node only if all the
  expressions are satisfied (expressions are ANDed)."
- NodeSelectorTerm: "A null or empty node selector term matches no objects. The
  requirements of them are ANDed."
- operators In, NotIn, Exists, DoesNotExist, Gt and Lt: "If the operator is Gt or Lt, the
  values array must have a single element, which will be interpreted as an integer."
  NotIn and DoesNotExist give anti-affinity: a node without the label matches them.
- matchFields: "A list of node selector requirements by node's fields", of which the API
  supports `metadata.name` (with In and NotIn)."""

from __future__ import annotations

import re
from typing import Any, Mapping

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _integer(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and _INTEGER.fullmatch(value) else None


def match_requirement(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a node's labels (or its fields)."""
    key, operator = req.get("key") or "", req.get("operator")
    values = list(req.get("values") or [])
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        have, bound = _integer(labels[key]), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def match_node_selector_term(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    """One NodeSelectorTerm: its matchExpressions (on labels) and matchFields (on
    `metadata.name`) ANDed; an empty term matches no node. (A pod's terms are ORed.)"""
    expressions = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not expressions and not fields:
        return False
    if not all(match_requirement(r, labels) for r in expressions):
        return False
    node_fields = {"metadata.name": node_name}
    return all(r.get("key") == "metadata.name" and r.get("operator") in ("In", "NotIn")
               and match_requirement(r, node_fields) for r in fields)
