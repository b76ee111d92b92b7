"""Label selectors (`metav1.LabelSelector`) as Kubernetes reads them, for the NetworkPolicies
the network plugin enforces (sim.network.netpol)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_requirements(selector: Mapping | None) -> list[Requirement] | None:
    """A `metav1.LabelSelector` (matchLabels and matchExpressions, ANDed) as requirements, as
    LabelSelectorAsSelector reads it: None for a null selector or an operator it refuses
    (matches nothing), [] for an empty one (matches everything)."""
    if selector is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(e.get("operator"))
        if op is None:
            return None
        reqs.append(Requirement(e.get("key", ""), op, tuple(e.get("values") or ())))
    return reqs
