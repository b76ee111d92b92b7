"""A pod's effective resource requests, as "Effective Pod requests and limits"
(https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/)
and "Pod Overhead" (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-overhead/)
define them, per resource:

- during initialization, init containers run one at a time beside the sidecars (init
  containers with `restartPolicy: Always`) already started: for each init container, its
  request plus those of the sidecars listed before it; the effective init request is the
  highest of these;
- afterwards, every app container and every sidecar runs: the sum of their requests;
- the pod's effective request is the higher of the two, and "a pod's overhead is considered
  in addition to the sum of container resource requests when scheduling a Pod"
  (`spec.overhead`, set at admission from the pod's RuntimeClass).

`non_missing` is what the scheduler's scoring counts for a container that requests none of
a resource (kube-scheduler: 100m of cpu, 200Mi of memory)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping

from .quantity import parse


def container_requests(container: Mapping[str, Any], non_missing: Mapping[str, Fraction] | None = None,
                       ) -> dict[str, Fraction]:
    """One container's requests (with the defaults for the resources it requests none of)."""
    raw = (container.get("resources") or {}).get("requests") or {}
    requests = {name: parse(value) for name, value in raw.items()}
    for name, default in (non_missing or {}).items():
        requests.setdefault(name, default)
    return requests


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Fraction(0)) + value


def pod_requests(pod: Mapping[str, Any], *, non_missing: Mapping[str, Fraction] | None = None,
                 ) -> dict[str, Fraction]:
    """The pod's effective request of every resource any of its containers requests."""
    spec = pod.get("spec") or {}
    running: dict[str, Fraction] = {}  # the app containers and every sidecar
    for c in spec.get("containers") or []:
        _add(running, container_requests(c, non_missing))
    init: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}  # the sidecars started so far
    zero = Fraction(0)
    for c in spec.get("initContainers") or []:
        own = container_requests(c, non_missing)
        for name in set(own) | set(sidecars):
            init[name] = max(init.get(name, zero), own.get(name, zero) + sidecars.get(name, zero))
        if c.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _add(running, own)
    effective = {name: max(running.get(name, zero), init.get(name, zero)) for name in set(running) | set(init)}
    _add(effective, {name: parse(value) for name, value in (spec.get("overhead") or {}).items()})
    return effective
