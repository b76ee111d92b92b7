"""Kubernetes objects as the node agent holds them: the API's JSON as dicts (`Obj`), and a
change to one as a watch delivers it (`Change`), for the parts that follow the cluster's
Services, EndpointSlices, NetworkPolicies and pods (sim.network, sim.kubelet.names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .resources import ResourceType

Obj = dict[str, Any]


@dataclass
class Change:
    rv: int  # the object's resourceVersion
    type: str  # ADDED, MODIFIED, DELETED
    rtype: ResourceType
    old: Obj | None
    new: Obj
