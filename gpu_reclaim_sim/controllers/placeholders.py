"""User placeholders, as z2jh's `user-placeholder` StatefulSet keeps them.

Each scenario placeholder entry keeps `count` pause pods `<name>-0..N-1` with a low
priority class and the requests of a user pod. A real user pod preempts one; like the
StatefulSet controller, this controller recreates a pod only once the old object is
gone, and the new one waits Pending (triggering a scale-up where an autoscaler is
configured) until room frees. That is how placeholders push users onto fresh nodes
that must pull the image first: the slow spawns of a class starting at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import errors
from ..api.quantity import parse as parse_quantity
from ..resources import BY_KIND
from ..scenario import Placeholder
from ..store import Filter, Obj

log = logging.getLogger("gpu_reclaim_sim.controllers.placeholders")

POD = BY_KIND["Pod"]
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
OWNER_LABEL = "sim.jupyterhub-gpu-reclaim/placeholder"
# requests the apiserver does not let a pod overcommit: they need limits equal to requests
_OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


def placeholder_pod(p: Placeholder, index: int) -> Obj:
    """The pod z2jh's user-placeholder StatefulSet template makes for replica `index`."""
    name = f"{p.name}-{index}"
    requests = {k: str(v) for k, v in p.requests.items() if parse_quantity(v) > 0}
    resources: dict[str, Any] = {"requests": requests} if requests else {}
    limits = {k: v for k, v in requests.items() if k not in _OVERCOMMITTABLE}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "pause",
            "image": PAUSE_IMAGE,
            "resources": resources,
            "securityContext": {"runAsUser": 65534, "runAsGroup": 65534,
                                "allowPrivilegeEscalation": False},
        }],
    }
    if p.priority_class_name:
        spec["priorityClassName"] = p.priority_class_name
    if p.node_selector:
        spec["nodeSelector"] = dict(p.node_selector)
    if p.tolerations:
        spec["tolerations"] = [dict(t) for t in p.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": p.namespace,
            "labels": {
                "app": "jupyterhub",
                "component": "user-placeholder",
                "statefulset.kubernetes.io/pod-name": name,
                OWNER_LABEL: p.name,
            },
        },
        "spec": spec,
    }


class PlaceholderController:
    def __init__(self, cluster: Any, *, resync_interval: float = 5.0) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.placeholders: list[Placeholder] = list(cluster.scenario.placeholders)
        self.resync_interval = resync_interval
        self._watch: Any = None
        self._task: asyncio.Task | None = None
        self.created = 0  # pods made, recreations included

    async def start(self) -> None:
        if not self.placeholders:
            return
        self._watch = self.store.watch(Filter(POD, label_selector=OWNER_LABEL))
        self.reconcile()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = self._watch = None

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            timer = loop.call_later(self.resync_interval, self._watch.queue.put_nowait, ("RESYNC", None))
            try:
                item = await self._watch.queue.get()
            finally:
                timer.cancel()
            if item is None:  # the watch was closed
                return
            if item[0] in ("DELETED", "RESYNC"):
                self.reconcile()

    def reconcile(self) -> None:
        """Create every placeholder pod that does not exist (one still terminating waits)."""
        for p in self.placeholders:
            for i in range(p.count):
                if self.store.find(POD, p.namespace, f"{p.name}-{i}") is not None:
                    continue
                try:
                    self.cluster.create(POD, placeholder_pod(p, i), p.namespace)
                    self.created += 1
                except errors.ApiError as e:  # e.g. namespace not there yet: next resync
                    log.warning("placeholders: cannot create %s/%s-%d: %s", p.namespace, p.name, i, e.message)
