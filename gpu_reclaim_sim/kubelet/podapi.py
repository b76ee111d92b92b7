"""What a pod's worker (sim.kubelet.podworker) reads and writes of the cluster, through one
small door (`PodApi`): the pod's status, its Events and its final delete; the Secrets and
ConfigMaps it refers to, the Services whose variables its containers get, its node, its
claims' volumes and its service account tokens.

Two implementations: `StorePodApi`, the old simulator's in-process store (sim.cluster), and
the real API server's, with the node's own credentials (sim.nodeagent.apipodapi). The reads
are synchronous, as the volume and environment code that makes them: an implementation
that must ask over the network fetches what a pod refers to in `prepare`, which the worker
awaits before it mounts the pod's volumes and before each start of a container (the
kubelet's own secret and configmap managers fetch what a pod refers to when it is added).
The writes are synchronous too and may be sent in the background (the kubelet's status
manager and event broadcaster do so); `remove` comes after them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from .. import errors
from ..controllers import persistentvolumes
from ..resources import BY_KIND
from ..store import Obj

log = logging.getLogger("gpu_reclaim_sim.kubelet.podapi")

POD, NODE, SVC = BY_KIND["Pod"], BY_KIND["Node"], BY_KIND["Service"]


class PodApi(Protocol):
    async def prepare(self, pod: Obj) -> None:
        """Fetch what `pod` refers to, for the reads below."""

    def lookup(self, namespace: str, kind: str, name: str) -> Obj | None:
        """A Secret or ConfigMap of the pod's namespace (None: not there)."""

    def services(self, namespace: str) -> Iterable[Obj]:
        """The Services a pod of `namespace` may see (sim.kubelet.names.service_env picks)."""

    def node(self, name: str) -> Obj | None: ...

    def claim_dir(self, namespace: str, claim: str) -> Path | None:
        """The host directory of a bound claim's volume; None: missing or not bound."""

    def token(self, pod: Obj, service_account: str, expiration: int, audience: str | None) -> str:
        """A token of `service_account` bound to `pod` (TokenRequest)."""

    def write_status(self, pod: Obj, mutate: Callable[[Obj], None]) -> Obj | None:
        """Apply `mutate` to the pod's status; the pod as it is now (None: gone, or another
        pod of the same name)."""

    def event(self, pod: Obj, reason: str, message: str, *, type_: str, host: str, field_path: str | None) -> None:
        """An Event about `pod` from the kubelet on `host` (refused ones are only logged)."""

    async def remove(self, pod: Obj) -> None:
        """The kubelet's final delete, once the pod's containers have stopped."""


class StorePodApi:
    """The simulator's in-process store (sim.cluster.Cluster: `store`, `events`,
    `service_account_token`)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store = cluster.store

    async def prepare(self, pod: Obj) -> None:
        pass  # the store is in memory

    def lookup(self, namespace: str, kind: str, name: str) -> Obj | None:
        return self.store.find(BY_KIND[kind], namespace, name)

    def services(self, namespace: str) -> Iterable[Obj]:
        return self.store.objects(SVC)

    def node(self, name: str) -> Obj | None:
        return self.store.find(NODE, None, name)

    def claim_dir(self, namespace: str, claim: str) -> Path | None:
        return persistentvolumes.claim_dir(self.store, namespace, claim)

    def token(self, pod: Obj, service_account: str, expiration: int, audience: str | None) -> str:
        return self.cluster.service_account_token(pod["metadata"]["namespace"], service_account, pod=pod,
                                                  expiration_seconds=expiration, audience=audience)

    def write_status(self, pod: Obj, mutate: Callable[[Obj], None]) -> Obj | None:
        meta = pod["metadata"]
        current = self.store.find(POD, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return None
        return self.store.update(POD, meta["namespace"], meta["name"], lambda o: mutate(o.setdefault("status", {})))

    def event(self, pod: Obj, reason: str, message: str, *, type_: str, host: str, field_path: str | None) -> None:
        meta = pod["metadata"]
        current = self.store.find(POD, meta["namespace"], meta["name"]) or pod
        try:
            self.cluster.events.record(current, reason, message, type_=type_, component="kubelet", host=host,
                                       field_path=field_path)
        except errors.ApiError as e:  # e.g. in a terminating namespace: refused, and the kubelet carries on
            log.debug("node %s: event %s of pod %s/%s refused: %s", host, reason, meta["namespace"], meta["name"],
                      e.message)

    async def remove(self, pod: Obj) -> None:
        remove_from_store(self.store, pod)


def remove_from_store(store: Any, pod: Obj) -> None:
    """The final delete in the store: the object goes if it is still this pod."""
    meta = pod["metadata"]
    current = store.find(POD, meta["namespace"], meta["name"])
    if current is not None and current["metadata"]["uid"] == meta["uid"]:
        try:
            store.remove(POD, meta["namespace"], meta["name"])
        except errors.ApiError:
            pass
